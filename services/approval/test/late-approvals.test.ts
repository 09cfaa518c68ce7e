import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createLogger } from '@gatehouse/platform';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// A pending approval the decision would refuse with 410 — its run ended, or it expired — is not
// offered as decidable: its view says `canDecide: false` with the decision's reason as the
// refusal, and the pending list leaves it out (one rule, `lateRefusal`, for both).
let t: TestDatabase;
let app: Express;
let lead: string;
let live: SeededAction;
let stopped: SeededAction;
let expired: SeededAction;

/** A seeded refund of 60.00 on O-1002 whose approval is pending (nobody decided it yet). */
async function pending(seed: Partial<Parameters<typeof createAction>[1]> = {}): Promise<SeededAction> {
  const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000, ...seed });
  await t.db
    .updateTable('approvals')
    .set({ status: 'pending', approver: null, decided_at: null })
    .where('id', '=', a.approvalId!)
    .execute();
  return a;
}

beforeAll(async () => {
  t = await createTestDatabase();
  const log = createLogger('approval-test');
  log.level = 'silent';
  app = testApprovalApp(t.db, log);
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  live = await pending();
  stopped = await pending({ workflowState: 'stopped' });
  expired = await pending();
  await t.db
    .updateTable('approvals')
    .set({ expires_at: new Date(Date.now() - 1000) })
    .where('id', '=', expired.approvalId!)
    .execute();
});
afterAll(async () => {
  await t?.drop();
});

const viewOf = async (a: SeededAction) => {
  const res = await request(app).get(`/v1/approvals/${a.approvalId}`).set('authorization', `Bearer ${lead}`);
  expect(res.status).toBe(200);
  return res.body as { canDecide: boolean; refusal: string | null; status: string };
};

describe('late approvals are not offered as decidable', () => {
  it("a stopped run's or an expired pending approval: canDecide false, with the reason the decision gives", async () => {
    expect(await viewOf(live)).toMatchObject({ status: 'pending', canDecide: true, refusal: null });
    expect(await viewOf(stopped)).toMatchObject({ status: 'pending', canDecide: false, refusal: 'workflow_stopped' });
    expect(await viewOf(expired)).toMatchObject({ status: 'pending', canDecide: false, refusal: 'expired' });
    for (const [a, reason] of [
      [stopped, 'workflow_stopped'],
      [expired, 'expired'],
    ] as const) {
      const res = await request(app)
        .post(`/v1/approvals/${a.approvalId}/decision`)
        .set('authorization', `Bearer ${lead}`)
        .send({ decision: 'approve', actionVersion: a.version, actionDigest: a.digest });
      expect(res.status).toBe(410);
      expect(res.body.error.reason).toBe(reason);
    }
  });

  it('every refused decision attempt on an approval of the tenant is audited with its reason; nothing is decided', async () => {
    const rep = await signUserToken({ sub: 'rep-ben', tenant: 'quillfeather', roles: ['rep'] }, SECRET);
    const res = await request(app)
      .post(`/v1/approvals/${live.approvalId}/decision`)
      .set('authorization', `Bearer ${rep}`)
      .send({ decision: 'approve', actionVersion: live.version, actionDigest: live.digest });
    expect(res.status).toBe(403);
    const refused = (await t.db.selectFrom('audit_outbox').select('event').execute())
      .map((r) => r.event as { type: string; approvalId: string | null; outcome: string | null; actorHash: string | null })
      .filter((e) => e.type === 'approval.refused');
    expect(refused.map((e) => [e.approvalId, e.outcome])).toEqual(
      expect.arrayContaining([
        [stopped.approvalId, 'workflow_stopped'],
        [expired.approvalId, 'expired'],
        [live.approvalId, 'not_a_lead'],
      ]),
    );
    expect(refused.every((e) => typeof e.actorHash === 'string' && e.actorHash.length > 0)).toBe(true);
    expect(await viewOf(live)).toMatchObject({ status: 'pending' });
  });

  it('the pending list holds only the approval that can still be decided', async () => {
    const res = await request(app).get('/v1/approvals?status=pending').set('authorization', `Bearer ${lead}`);
    expect(res.status).toBe(200);
    expect(res.body.approvals.map((a: { approvalId: string }) => a.approvalId)).toEqual([live.approvalId]);
  });
});
