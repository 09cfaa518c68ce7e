import { describe, expect, it, vi } from 'vitest';
import { AbuseLimiter, createLogger } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// The ops dashboard audits each refusal of a known caller who is not an operator (`ops.refused`).
// Any valid token of the directory could therefore write the audit chain at the rate it sends
// requests. Those refusals count against the sign-in limits (per user, per tenant, in Redis):
// past them the caller gets 429 with Retry-After and nothing more is audited (ADR 0725).

const PER_USER = 3;

const log = createLogger('ops-refusal-limit-test');
log.level = 'silent';
const warned = vi.spyOn(log, 'warn');

const app = opsAppFixture('ops-refusal-limit-test', ({ redis, prefix }) => ({
  log,
  signInLimiter: new AbuseLimiter(redis, prefix, { surface: 'signin', perUser: PER_USER, perTenant: 100, windowSeconds: 60 }),
}));

const refusalsAudited = async () =>
  (await app.db().selectFrom('audit_outbox').select('event').execute()).filter((r) => (r.event as { type: string }).type === 'ops.refused')
    .length;

describe('refusals of non-operators', () => {
  it(`a rep's token, 10 requests: ${PER_USER} refused 403 and audited, the rest 429 with Retry-After and not audited`, async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    for (let i = 0; i < 10; i++) {
      const r = await fetch(`${app.url()}/api/webhooks`, { headers: { authorization: `Bearer ${rep}` } });
      statuses.push(r.status);
      if (r.status === 429) retryAfter = r.headers.get('retry-after');
      await r.arrayBuffer();
    }
    expect(statuses).toEqual([...Array(PER_USER).fill(403), ...Array(10 - PER_USER).fill(429)]);
    expect(Number(retryAfter)).toBeGreaterThan(0);
    expect(await refusalsAudited()).toBe(PER_USER);
    // Every refusal is logged, the limited ones too, saying whether it was audited (ADR 0725).
    const refusals = warned.mock.calls.filter(([, msg]) => msg === 'ops dashboard refused a non-operator').map(([o]) => o);
    expect(refusals).toEqual([
      ...Array(PER_USER).fill({ user: 'rep-ana', where: '/api/webhooks', audited: true }),
      ...Array(10 - PER_USER).fill({ user: 'rep-ana', where: '/api/webhooks', audited: false }),
    ]);
    // An operator is not counted: the dashboard still answers ops-gus.
    const ops = await tokenFor('ops-gus', SECRET);
    expect((await fetch(`${app.url()}/api/webhooks`, { headers: { authorization: `Bearer ${ops}` } })).status).toBe(200);
  });
});
