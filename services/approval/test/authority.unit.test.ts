import { describe, expect, it } from 'vitest';
import { loadWorld } from '@gatehouse/contracts';
import { ForbiddenError } from '@gatehouse/platform';
import { assertAuthority, authorityRefusal, type ApprovalSubject } from '../src/domain/authority.ts';

const world = loadWorld();

function person(id: string) {
  const u = world.users.find((x) => x.id === id);
  if (!u) throw new Error(`no user ${id} in world`);
  return u;
}

/** An approval requested by `requesterId` for `amountCents`, in the requester's tenant and region. */
function requestBy(requesterId: string, amountCents: number | null): ApprovalSubject {
  const r = person(requesterId);
  return { tenant: r.tenant, region: r.region ?? null, requester: r.id, amountCents, approverRole: 'lead', sameRegion: true };
}

/** A change-pack schedule approval (change-c1: a change owner of the tenant, any region). */
function scheduleBy(requesterId: string): ApprovalSubject {
  const r = person(requesterId);
  return {
    tenant: r.tenant,
    region: r.region ?? null,
    requester: r.id,
    amountCents: null,
    approverRole: 'change_owner',
    sameRegion: false,
  };
}

const usRefund = requestBy('rep-ana', 12000);

describe('authorityRefusal (docs/product/hard-cases.md#approver-checks)', () => {
  it('the world has the people these cases rely on', () => {
    expect(person('rep-ana').region).toBe('US');
    expect(person('rep-ben').role).toBe('rep');
    expect(person('lead-fay')).toMatchObject({ role: 'lead', region: 'US' });
    expect(person('lead-fay').approveLimit).toBeLessThan(12000);
    expect(person('lead-dee')).toMatchObject({ role: 'lead', region: 'EU' });
    expect(person('lead-eli')).toMatchObject({ role: 'lead', region: 'US' });
    expect(person('lead-eli').approveLimit).toBeGreaterThanOrEqual(12000);
  });

  it.each<[string, string, ApprovalSubject, string]>([
    ['the requester approving her own request', 'rep-ana', usRefund, 'requester_cannot_approve'],
    ['a non-lead', 'rep-ben', usRefund, 'not_a_lead'],
    ['a lead whose limit is too low (lead-fay, 12000)', 'lead-fay', usRefund, 'approve_limit_too_low'],
    ['a lead of another region (lead-dee EU, US request)', 'lead-dee', usRefund, 'wrong_region'],
    ['an operator', 'ops-gus', usRefund, 'not_a_lead'],
    ['someone not in the world', 'lead-nobody', usRefund, 'unknown_approver'],
  ])('%s is refused', (_name, approver, subject, reason) => {
    const tenant = person(subject.requester).tenant;
    expect(authorityRefusal(approver, tenant, subject)).toBe(reason);
    expect(() => assertAuthority(approver, tenant, subject)).toThrow(ForbiddenError);
  });

  it('each refusal has its own reason', () => {
    const tenant = person('rep-ana').tenant;
    const reasons = ['rep-ana', 'rep-ben', 'lead-fay', 'lead-dee'].map((a) => authorityRefusal(a, tenant, usRefund));
    expect(new Set(reasons).size).toBe(4);
    expect(reasons).not.toContain(null);
  });

  it('lead-eli (US lead, limit covers 12000) may approve', () => {
    expect(authorityRefusal('lead-eli', person('rep-ana').tenant, usRefund)).toBeNull();
    expect(() => assertAuthority('lead-eli', person('rep-ana').tenant, usRefund)).not.toThrow();
  });

  it('lead-dee may approve an EU request', () => {
    expect(authorityRefusal('lead-dee', person('rep-eva').tenant, requestBy('rep-eva', 12000))).toBeNull();
  });

  it('the approve limit is inclusive: at the limit yes, one cent above no', () => {
    const limit = person('lead-fay').approveLimit ?? 0;
    const tenant = person('rep-ana').tenant;
    expect(authorityRefusal('lead-fay', tenant, requestBy('rep-ana', limit))).toBeNull();
    expect(authorityRefusal('lead-fay', tenant, requestBy('rep-ana', limit + 1))).toBe('approve_limit_too_low');
  });

  it('a lead of another tenant is refused', () => {
    const lead = person('lead-jon');
    // as seen from the requester's tenant the lead does not exist
    expect(authorityRefusal(lead.id, person('rep-ana').tenant, usRefund)).toBe('unknown_approver');
    // with the lead's own tenant claim the approval is still not theirs
    expect(authorityRefusal(lead.id, lead.tenant, usRefund)).toBe('wrong_tenant');
  });

  it('a reship approval (no amount) needs no limit but still a same-region lead', () => {
    const tenant = person('rep-ana').tenant;
    const reship = requestBy('rep-ana', null);
    expect(authorityRefusal('lead-fay', tenant, reship)).toBeNull();
    expect(authorityRefusal('lead-dee', tenant, reship)).toBe('wrong_region');
  });

  // Regression: a request without a region is refused (fail closed), never approvable from any region.
  it('a request without a region is not approvable by a lead of an arbitrary region', () => {
    const subject: ApprovalSubject = { ...usRefund, region: null };
    expect(authorityRefusal('lead-dee', person('rep-ana').tenant, subject)).not.toBeNull();
  });

  it('change pack: only a change owner of the tenant decides a schedule; leads, engineers and the requester cannot', () => {
    const tenant = person('eng-lou').tenant;
    const schedule = scheduleBy('eng-lou');
    expect(authorityRefusal('own-kim', tenant, schedule)).toBeNull();
    expect(authorityRefusal('eng-lou', tenant, schedule)).toBe('requester_cannot_approve');
    expect(authorityRefusal('eng-max', tenant, schedule)).toBe('not_a_change_owner');
    expect(authorityRefusal('lead-eli', tenant, schedule)).toBe('not_a_change_owner');
    expect(authorityRefusal('lead-jon', 'northwind', schedule)).toBe('not_a_change_owner');
    // And a change owner cannot decide a support refund.
    expect(authorityRefusal('own-kim', tenant, usRefund)).toBe('not_a_lead');
  });

  it('release override: a policy owner or another operator decides it; a lead, a change owner, the requester cannot (ADR 0230)', () => {
    const tenant = person('ops-gus').tenant;
    const override: ApprovalSubject = {
      tenant,
      region: null,
      requester: 'ops-gus',
      amountCents: null,
      approverRole: 'release_approver',
      sameRegion: false,
    };
    expect(authorityRefusal('pol-hal', tenant, override)).toBeNull();
    expect(authorityRefusal('ops-ida', tenant, override)).toBeNull();
    expect(authorityRefusal('ops-gus', tenant, override)).toBe('requester_cannot_approve');
    expect(authorityRefusal('lead-eli', tenant, override)).toBe('not_a_release_approver');
    expect(authorityRefusal('own-kim', tenant, override)).toBe('not_a_release_approver');
    // The roles that hold it hold it for this kind only: an operator or a policy owner decides no refund.
    expect(authorityRefusal('ops-ida', tenant, usRefund)).toBe('not_a_lead');
    expect(authorityRefusal('pol-hal', tenant, usRefund)).toBe('not_a_lead');
  });
});
