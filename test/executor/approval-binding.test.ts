import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { decideApproval } from '@gatehouse/approval';
import { recordedRefundsCents } from '@gatehouse/policy';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from './support/harness.ts';

// docs/product/invariants.md#approval: an approval is consumed only by the exact action it names, and is decided
// exactly once however many deciders race.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

/** A refund of 12000 approved by lead-eli, and one of 45000 that was never approved. */
async function approvedAndUnapproved(orderId: string) {
  const approved = await createAction(h.db, { orderId, amountCents: 12000 });
  const unapproved = await createAction(h.db, { orderId, amountCents: 45000, approved: false });
  // The 45000 job carries the 12000 approval (a forged, misrouted or replayed job).
  return { approved, forgedJob: { ...unapproved.job, approvalId: approved.approvalId } };
}

describe('approval binding at consumption', () => {
  it('an approval for one action cannot be consumed by another: zero refunds, approval still unused', async () => {
    const orderId = await h.newOrder();
    const { approved, forgedJob } = await approvedAndUnapproved(orderId);
    const outcome = await processExecution(forgedJob, h.deps());
    expect(outcome).toBe('refused:approval_names_another_action');
    expect(await h.refunds(orderId)).toEqual([]);
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toEqual([]);
    const row = await h.db.selectFrom('approvals').select('status').where('id', '=', approved.approvalId!).executeTakeFirstOrThrow();
    expect(row.status).toBe('approved');
  });

  // helper-71: the refused action stayed `approved` with its operation pending, so its 45000 counted
  // as queued money out in every later limit check of its order, rep and tenant, and a later
  // delivery of a job with its own approval would still have run the refund the model was told
  // did not run. It now ends with the refusal (ADR 0610).
  it('the refused action ends with its answer: it leaves the limit sums and a later job cannot run it', async () => {
    const orderId = await h.newOrder();
    const { approved, forgedJob } = await approvedAndUnapproved(orderId);
    expect(await recordedRefundsCents(h.db, { orderId, includeQueued: true })).toBe(57000);
    expect(await processExecution(forgedJob, h.deps())).toBe('refused:approval_names_another_action');
    const action = await h.db
      .selectFrom('actions')
      .select(['status', 'call_id'])
      .where('id', '=', forgedJob.actionId)
      .executeTakeFirstOrThrow();
    expect(action.status).toBe('superseded');
    expect(await recordedRefundsCents(h.db, { orderId, includeQueued: true })).toBe(12000);
    const answers = await h.db.selectFrom('outbox').select('payload').where('queue', 'like', 'results%').execute();
    expect(answers.filter((r) => r.payload.callId === action.call_id)).toHaveLength(1);
    // A second delivery of the stray job, and the approved action's own job, each do what they did.
    expect(await processExecution(forgedJob, h.deps())).toBe('skip:action_superseded');
    expect(await processExecution(approved.job, h.deps())).toBe('succeeded');
    expect((await h.refunds(orderId)).map((r) => r.amountCents)).toEqual([12000]);
  });

  it('control removed (no digest binding): the 45000 refund executes on the 12000 approval', async () => {
    const orderId = await h.newOrder();
    const { forgedJob } = await approvedAndUnapproved(orderId);
    const deps = h.deps();
    const outcome = await processExecution(forgedJob, { ...deps, hooks: { ...deps.hooks, disableDigestBinding: true } });
    expect(outcome).toBe('succeeded');
    expect((await h.refunds(orderId)).map((r) => r.amountCents)).toEqual([45000]);
  });
});

/** A reship decided when its order had paid `decidedPaidCents`, approved by lead-eli (limit 50000) for that amount. */
async function approvedReship(orderId: string, decidedPaidCents: number) {
  const a = await createAction(h.db, { orderId, tool: 'reship_order' });
  await h.db
    .updateTable('actions')
    .set({ facts: JSON.stringify({ orderPaidCents: decidedPaidCents }) })
    .where('id', '=', a.actionId)
    .execute();
  await h.db.updateTable('approvals').set({ amount_cents: decidedPaidCents }).where('id', '=', a.approvalId!).execute();
  return a;
}

// docs/product/policy-rules.md#approvals: the approver's limit covers the amount at stake; helper-51 found a reship approved
// for 45000 shipped after its order's paid amount rose to 90000, above the approving lead's limit.
describe('the amount an approval was granted for, at execution', () => {
  it('a reship whose order paid more since the decision (45000 → 90000) needs a new approval: zero shipments, the approval unused', async () => {
    const orderId = await h.newOrder(90_000);
    const a = await approvedReship(orderId, 45_000);
    expect(await processExecution(a.job, h.deps())).toMatch(/^reevaluated:/);
    expect(await h.shipments(orderId)).toEqual([]);
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toEqual([]);
    const approval = await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
    expect(approval.status).not.toBe('used');
    const next = await h.db
      .selectFrom('actions')
      .select(['version', 'decision', 'facts'])
      .where('workflow_id', '=', a.workflowId)
      .where('version', '>', 1)
      .execute();
    expect(next).toMatchObject([{ version: 2, decision: 'REQUIRE_APPROVAL', facts: expect.objectContaining({ orderPaidCents: 90_000 }) }]);
  });

  it('the same reship whose order paid what was approved ships once', async () => {
    const orderId = await h.newOrder(45_000);
    const a = await approvedReship(orderId, 45_000);
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect(await h.shipments(orderId)).toHaveLength(1);
  });
});

describe('approval decisions under concurrency', () => {
  it('50 trials of two deciders at once (barrier): exactly one decision recorded, the other refused', { timeout: 60_000 }, async () => {
    const orderId = await h.newOrder();
    for (let i = 0; i < 50; i++) {
      const a = await createAction(h.db, { orderId, amountCents: 12000 });
      // Back to pending, as the approval service opened it.
      await h.db
        .updateTable('approvals')
        .set({ status: 'pending', approver: null, decided_at: null })
        .where('id', '=', a.approvalId!)
        .execute();
      await h.db.updateTable('actions').set({ status: 'pending_approval' }).where('id', '=', a.actionId).execute();
      const caller = { sub: 'lead-eli', tenant: 'quillfeather' };
      const body = (decision: 'approve' | 'deny') => ({ decision, actionVersion: a.version, actionDigest: a.digest });
      const results = await Promise.allSettled([
        decideApproval(h.db, caller, a.approvalId!, body('approve'), AUDIT_HMAC_KEY),
        decideApproval(h.db, caller, a.approvalId!, body('deny'), AUDIT_HMAC_KEY),
      ]);
      const ok = results.filter((r) => r.status === 'fulfilled');
      const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(ok).toHaveLength(1);
      expect(refused).toHaveLength(1);
      expect(String((refused[0]!.reason as { reason?: string }).reason)).toMatch(/^already_|already_decided/);
      const row = await h.db.selectFrom('approvals').select(['status']).where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
      expect(['approved', 'denied']).toContain(row.status);
    }
    const events = await h.db
      .selectFrom('audit_outbox')
      .select('event')
      .execute()
      .then((rows) => rows.map((r) => r.event).filter((e) => e.type === 'approval.decided' && e.actorHash !== null));
    expect(events).toHaveLength(50);
  });
});
