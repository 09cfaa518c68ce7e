import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { inTransaction, stopRun } from '@gatehouse/ledger';
import { recordedRefundsCents } from '@gatehouse/policy';

// A run that stops never claims its unclaimed actions again (a claim starts an effect only in a
// run that may move to `executing`). They end with it: superseded, their approvals voided and
// audited, so an approved refund left in a stopped run no longer counts as queued money out in
// the order's, the user's and the tenant's limits (docs/decisions/0610-a-stopped-run-ends-its-unclaimed-actions.md).
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const statusOf = async (table: 'actions' | 'approvals', id: string) =>
  (await t.db.selectFrom(table).select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

describe('a stopped run ends its unclaimed actions', () => {
  it('an approved refund and a pending approval of a stopped run: superseded, approvals voided and audited, out of every sum', async () => {
    const allowed = await createAction(t.db, { orderId: 'O-LEFT-1', amountCents: 4500 }); // ALLOW, approved, not claimed
    const queuedCents = () => recordedRefundsCents(t.db, { orderId: 'O-LEFT-1', includeQueued: true });
    expect(await queuedCents()).toBe(4500);
    const wf = await t.db
      .selectFrom('workflows')
      .select(['id', 'release_id'])
      .where('id', '=', allowed.workflowId)
      .executeTakeFirstOrThrow();
    await inTransaction(t.db, (trx) => stopRun(trx, wf, 'validation_failed', 'Resubmit the ticket.', 'agent-loop'));
    expect(await statusOf('actions', allowed.actionId)).toBe('superseded');
    expect(await queuedCents()).toBe(0);
    expect(await recordedRefundsCents(t.db, { userId: 'rep-ana', tenant: 'quillfeather', includeQueued: true })).toBe(0);

    const big = await createAction(t.db, { orderId: 'O-LEFT-2', amountCents: 12000, approved: true });
    await t.db
      .updateTable('approvals')
      .set({ status: 'pending', approver: null, decided_at: null })
      .where('id', '=', big.approvalId!)
      .execute();
    await t.db.updateTable('actions').set({ status: 'pending_approval' }).where('id', '=', big.actionId).execute();
    const run = await t.db.selectFrom('workflows').select(['id', 'release_id']).where('id', '=', big.workflowId).executeTakeFirstOrThrow();
    await inTransaction(t.db, (trx) => stopRun(trx, run, 'approval_expired', 'Submit a new ticket.', 'approval'));
    expect(await statusOf('actions', big.actionId)).toBe('superseded');
    expect(await statusOf('approvals', big.approvalId!)).toBe('void');
    const voided = (await t.db.selectFrom('audit_outbox').select('event').execute())
      .map((r) => r.event as { type: string; approvalId: string | null; outcome: string | null })
      .filter((e) => e.type === 'approval.voided' && e.approvalId === big.approvalId);
    expect(voided).toEqual([expect.objectContaining({ outcome: 'run_stopped' })]);
  });

  it('a running or finished action is left as it is', async () => {
    const running = await createAction(t.db, { orderId: 'O-LEFT-3', amountCents: 3000 });
    await recordEffect(t.db, running, { status: 'running' });
    const wf = await t.db
      .selectFrom('workflows')
      .select(['id', 'release_id'])
      .where('id', '=', running.workflowId)
      .executeTakeFirstOrThrow();
    await inTransaction(t.db, (trx) => stopRun(trx, wf, 'dependency_unavailable', 'Wait, then resubmit.', 'executor'));
    expect(await statusOf('actions', running.actionId)).toBe('running');
    expect(await recordedRefundsCents(t.db, { orderId: 'O-LEFT-3', includeQueued: true })).toBe(3000);
  });
});
