import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import request from 'supertest';
import { loadReleaseManifest, repoRoot, resetTestFaultsForTests } from '@gatehouse/contracts';
import type { OutboxRelay } from '@gatehouse/platform';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { activateRelease, activationNeeds, raisedLimits, requestActivationOverride, TwoPersonRequired } from '@gatehouse/operations';
import { sweepExpiredApprovals } from '@gatehouse/approval';
import { approvalApi, type ApprovalApi } from '../support/approval-api.ts';

/**
 * Two-person release changes (docs/decisions/0230-two-person-release-changes.md): activating a
 * bundle looser than the active one, or forcing one past its gate, needs an override one
 * operator asks for and a second person — a policy owner or another operator, never the
 * requester, never a support lead — approves through the approval service (API or inbox):
 * bound to the manifest and exactly what it loosens, expiring, used once.
 */
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
let api: ApprovalApi;
const releasesDir = mkdtempSync(resolve(tmpdir(), 'gh-2p-'));
const policyDir = mkdtempSync(resolve(tmpdir(), 'gh-2p-policy-'));
const gus = { operator: 'ops-gus', hmacKey: HMAC };
const REASON = 'longer approval window for the EU night shift';

type BundleJson = { revision: string; approval: { ttlSeconds: number; sameRegion: boolean } };
function writeBundle(revision: string, change: (b: BundleJson) => void): void {
  const b = JSON.parse(readFileSync(resolve(repoRoot, 'policy/support-p1.json'), 'utf8')) as BundleJson;
  b.revision = revision;
  change(b);
  writeFileSync(resolve(policyDir, `${revision}.json`), JSON.stringify(b));
}
function writeRelease(id: string, support: string): void {
  const m = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as { id: string; policy: { support: string } };
  m.id = id;
  m.policy.support = support;
  writeFileSync(resolve(releasesDir, `${id}.json`), JSON.stringify(m));
}

/** Activation's refusal: why each unmet need had no usable override. */
async function refusal(release: string): Promise<string[]> {
  const err = await activateRelease(t.db, release, gus).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(TwoPersonRequired);
  return (err as TwoPersonRequired).needs.map((n) => `${n.kind}:${n.why}`);
}

/** Asks for the raise-limits override of rel-long as ops-gus; its approval id. */
async function askRaise(reason = REASON): Promise<string> {
  const [need] = await activationNeeds(t.db, 'rel-long', {});
  return (await requestActivationOverride(t.db, 'rel-long', need!, { ...gus, reason })).approvalId;
}

const approval = (id: string) =>
  t.db.selectFrom('approvals').select(['status', 'approver', 'workflow_id']).where('id', '=', id).executeTakeFirstOrThrow();
const runOf = async (id: string) =>
  t.db
    .selectFrom('workflows')
    .select(['state', 'stop_reason'])
    .where('id', '=', (await approval(id)).workflow_id)
    .executeTakeFirstOrThrow();

const saved = { RELEASES_DIR: process.env.RELEASES_DIR, POLICY_DIR: process.env.POLICY_DIR };
beforeAll(async () => {
  t = await createTestDatabase();
  api = approvalApi(t.db);
  for (const f of ['support-p1.json', 'support-p2.json', 'change-c1.json'])
    copyFileSync(resolve(repoRoot, 'policy', f), resolve(policyDir, f));
  copyFileSync(
    resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json'),
    resolve(policyDir, 'support-units-mistake.json'),
  );
  // Approvals that live 20 minutes instead of 15: passes every boundary case, but is looser.
  writeBundle('support-long-approvals', (b) => (b.approval.ttlSeconds = 1200));
  // A lead of any region may approve: passes every boundary case (they judge the action, not who approves it), but is looser.
  writeBundle('support-any-region', (b) => (b.approval.sameRegion = false));
  writeRelease('rel-1', 'support-p1');
  writeRelease('rel-long', 'support-long-approvals');
  writeRelease('rel-p2', 'support-p2');
  process.env.RELEASES_DIR = releasesDir;
  process.env.POLICY_DIR = policyDir;
  await activateRelease(t.db, 'rel-1', gus);
});
afterAll(async () => {
  for (const [k, v] of Object.entries(saved))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  await t?.drop();
});

describe('which bundle changes loosen a limit', () => {
  it('the units mistake raises the maximum and the auto limit; a tighter or added limit raises nothing', () => {
    const m = (support: string) => ({ ...loadReleaseManifest('rel-1'), policy: { support, change: 'change-c1' } });
    expect(raisedLimits(m('support-p1'), m('support-units-mistake'))).toEqual([
      'support.limits.maxRefundCents: 50000 → 5000000',
      'support.limits.autoApproveLimitCents: 5000 → 500000',
    ]);
    expect(raisedLimits(m('support-units-mistake'), m('support-p1'))).toEqual([]);
    expect(raisedLimits(m('support-p1'), m('support-p2'))).toEqual([]); // R10 adds a cap
    expect(raisedLimits(m('support-p1'), m('support-long-approvals'))).toEqual(['support.approval.ttlSeconds: 900 → 1200']);
    expect(raisedLimits(null, m('support-units-mistake'))).toEqual([]);
  });

  it("dropping the approver's same-region requirement loosens who may approve; adding it does not", () => {
    const m = (support: string) => ({ ...loadReleaseManifest('rel-1'), policy: { support, change: 'change-c1' } });
    expect(raisedLimits(m('support-p1'), m('support-any-region'))).toEqual(['support.approval.sameRegion: true → false']);
    expect(raisedLimits(m('support-any-region'), m('support-p1'))).toEqual([]);
  });
});

describe('activating a looser bundle', () => {
  it('refused for one operator; the requester and a support lead cannot approve; a policy owner approves through the approval API; used once', async () => {
    const before = await t.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute();
    expect(await refusal('rel-long')).toEqual(['raise_limits:none']);
    expect(await t.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute()).toEqual(before);

    const id = await askRaise();
    const shown = await api.show('pol-hal', id);
    expect(shown.status).toBe(200);
    expect(shown.body).toMatchObject({
      tool: 'release_override',
      target: 'rel-long',
      arguments: { release: 'rel-long', kind: 'raise_limits', covers: ['support.approval.ttlSeconds: 900 → 1200'], reason: REASON },
      orderFacts: { release: 'rel-long', policy: 'support-long-approvals, change-c1', activeRelease: 'rel-1' },
      requester: 'ops-gus',
      approverRole: 'release_approver',
      ruleId: 'RELEASE',
      singleUse: true,
      status: 'pending',
      canDecide: true,
    });
    expect(await refusal('rel-long')).toEqual(['raise_limits:pending']);

    // The requester, a support lead and a change owner may not decide it; it is not in their pending list.
    for (const [who, why] of [
      ['ops-gus', 'requester_cannot_approve'],
      ['lead-eli', 'not_a_release_approver'],
      ['own-kim', 'not_a_release_approver'],
    ] as const) {
      const r = await api.decide(who, id);
      expect(r.status, `${who}: ${JSON.stringify(r.body)}`).toBe(403);
      expect(JSON.stringify(r.body)).toContain(why);
      expect(await api.pending(who)).not.toContain(id);
    }
    expect(await api.pending('pol-hal')).toContain(id);
    expect(await api.pending('ops-ida')).toContain(id);

    const decided = await api.decide('pol-hal', id);
    expect(decided).toMatchObject({ status: 200, body: { approvalId: id, status: 'approved' } });
    expect(await activateRelease(t.db, 'rel-long', gus)).toMatchObject({ status: 'active' });
    expect(await approval(id)).toMatchObject({ status: 'used', approver: 'pol-hal' });
    expect(await runOf(id)).toMatchObject({ state: 'completed' });
    // Its completion is audited like every run's (ADR 0755): once, by the command that used it.
    const runId = (await approval(id)).workflow_id;
    const completions = (await t.db.selectFrom('audit_outbox').select('event').execute())
      .map((e) => e.event as { type?: string; runId?: string; service?: string; outcome?: string })
      .filter((e) => e.type === 'run.completed' && e.runId === runId);
    expect(completions).toEqual([expect.objectContaining({ service: 'cli', outcome: 'override_used' })]);

    // Single use: back to rel-1 (tighter: nobody else needed), then the same loosening again is refused.
    expect(await activateRelease(t.db, 'rel-1', gus)).toMatchObject({ status: 'active' });
    expect(await refusal('rel-long')).toEqual(['raise_limits:used']);
    const events = (await t.db.selectFrom('audit_outbox').select('event').execute()).map((e) => String(e.event.type));
    for (const type of [
      'release.override_requested',
      'approval.requested',
      'approval.decided',
      'approval.consumed',
      'release.override_used',
    ])
      expect(events).toContain(type);
  });

  it('a denied override, an expired one and a pending one past its expiry are refused', async () => {
    const denied = await askRaise();
    expect(await api.decide('ops-ida', denied, 'deny')).toMatchObject({ status: 200, body: { status: 'denied' } });
    expect(await refusal('rel-long')).toEqual(['raise_limits:denied']);
    expect(await runOf(denied)).toMatchObject({ state: 'stopped', stop_reason: 'denied' });
    const runId = (await approval(denied)).workflow_id;
    const stops = (await t.db.selectFrom('audit_outbox').select('event').execute())
      .map((r) => r.event as { type: string; runId: string | null; outcome: string | null; service: string })
      .filter((e) => e.type === 'run.stopped' && e.runId === runId);
    expect(stops, 'the stop is audited').toEqual([expect.objectContaining({ outcome: 'denied', service: 'approval' })]);

    const expired = await askRaise();
    expect((await api.decide('ops-ida', expired)).status).toBe(200);
    await t.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', expired)
      .execute();
    expect(await refusal('rel-long')).toEqual(['raise_limits:expired']);
    expect(await approval(expired)).toMatchObject({ status: 'approved' });

    const late = await askRaise();
    await t.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', late)
      .execute();
    expect((await api.decide('ops-ida', late)).status).toBe(410);
    await sweepExpiredApprovals({ db: t.db, relay: { publish: async () => {} } as unknown as OutboxRelay });
    expect(await approval(late)).toMatchObject({ status: 'expired' });
    expect(await runOf(late)).toMatchObject({ state: 'stopped', stop_reason: 'approval_expired' });
    expect(await refusal('rel-long')).toEqual(['raise_limits:expired']);
    // Approved and never used: the same sweep ends it, so its run does not wait on a person forever.
    expect(await approval(expired)).toMatchObject({ status: 'expired' });
    expect(await runOf(expired)).toMatchObject({ state: 'stopped', stop_reason: 'approval_expired' });
  });

  it('an approval bound to other limits is refused: the bundle changed after it was approved', async () => {
    const id = await askRaise();
    expect((await api.decide('pol-hal', id)).status).toBe(200);
    writeBundle('support-long-approvals', (b) => (b.approval.ttlSeconds = 1500));
    try {
      expect(await refusal('rel-long')).toEqual(['raise_limits:digest_mismatch']);
      expect(await approval(id)).toMatchObject({ status: 'approved' });
    } finally {
      writeBundle('support-long-approvals', (b) => (b.approval.ttlSeconds = 1200));
      // A lead of any region may approve: passes every boundary case (they judge the action, not who approves it), but is looser.
      writeBundle('support-any-region', (b) => (b.approval.sameRegion = false));
    }
    // What it was approved for is what activates.
    expect(await activateRelease(t.db, 'rel-long', gus)).toMatchObject({ status: 'active' });
    expect(await approval(id)).toMatchObject({ status: 'used' });
    await activateRelease(t.db, 'rel-1', gus);
  });
});

describe('the approval inbox', () => {
  it('shows the override with the manifest and what it covers, and a policy owner approves it there', async () => {
    const id = await askRaise('inbox: <b>night shift</b>');
    const signIn = async (user: string) => {
      const r = await request(api.app)
        .post('/inbox/session')
        .type('form')
        .send({ token: await tokenFor(user, 'local-auth-secret-change-me') });
      expect(r.status).toBe(303);
      return String(r.headers['set-cookie']).split(';')[0]!;
    };
    const lead = await request(api.app)
      .get('/inbox/approvals')
      .set('cookie', await signIn('lead-eli'));
    expect(lead.text).toContain(`data-approval="${id}"`);
    expect(lead.text).toContain('You cannot decide this approval: not_a_release_approver');

    const cookie = await signIn('pol-hal');
    const page = await request(api.app).get('/inbox/approvals').set('cookie', cookie);
    const card = page.text.slice(page.text.indexOf(`data-approval="${id}"`));
    for (const text of [
      'release_override on rel-long',
      'raise_limits',
      'support.approval.ttlSeconds: 900 → 1200',
      'support-long-approvals, change-c1',
      'inbox: &#60;b&#62;night shift&#60;/b&#62;',
      'release override: raise_limits',
      'Reason (requester text)',
      'ops-gus',
    ])
      expect(card).toContain(text);
    const field = (name: string) => new RegExp(`name="${name}" value="([^"]+)"`).exec(card)![1]!;
    const posted = await request(api.app)
      .post(`/inbox/approvals/${id}/decision`)
      .set('cookie', cookie)
      .type('form')
      .send({ csrf: field('csrf'), actionVersion: field('actionVersion'), actionDigest: field('actionDigest'), decision: 'approve' });
    expect(posted.status).toBe(303);
    expect(await activateRelease(t.db, 'rel-long', gus)).toMatchObject({ status: 'active' });
    await activateRelease(t.db, 'rel-1', gus);
  });
});

describe('control removed (GATEHOUSE_TEST_SKIP_TWO_PERSON)', () => {
  it('one operator activates a looser bundle alone: the second person is what stops it', async () => {
    expect(await refusal('rel-long')).toEqual(['raise_limits:used']);
    const env = process.env.GATEHOUSE_ENV;
    process.env.GATEHOUSE_TEST_SKIP_TWO_PERSON = '1';
    resetTestFaultsForTests();
    try {
      await expect(activateRelease(t.db, 'rel-long', gus)).rejects.toThrow(/only be set with GATEHOUSE_ENV=test/);
      process.env.GATEHOUSE_ENV = 'test';
      resetTestFaultsForTests();
      expect(await activateRelease(t.db, 'rel-long', gus)).toMatchObject({ status: 'active' });
    } finally {
      delete process.env.GATEHOUSE_TEST_SKIP_TWO_PERSON;
      process.env.GATEHOUSE_ENV = env;
      resetTestFaultsForTests();
    }
    await activateRelease(t.db, 'rel-1', gus);
  });
});

describe('what an override covers', () => {
  it('an override for one loosening does not cover another; a tighter or equal bundle needs none', async () => {
    // An approved override for another raise than the one rel-long makes.
    const [need] = await activationNeeds(t.db, 'rel-long', {});
    const other = await requestActivationOverride(
      t.db,
      'rel-long',
      { ...need!, items: ['support.limits.maxRefundCents: 50000 → 60000'] },
      { ...gus, reason: 'x' },
    );
    expect((await api.decide('ops-ida', other.approvalId)).status).toBe(200);
    expect(await refusal('rel-long')).toEqual(['raise_limits:digest_mismatch']);
    // support-p2 only adds a cap: one operator suffices.
    expect(await activateRelease(t.db, 'rel-p2', gus)).toMatchObject({ status: 'active' });
  });
});
