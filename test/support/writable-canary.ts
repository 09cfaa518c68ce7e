import { DEFAULT_CANARY_THRESHOLDS, approvalRequestsQueue, type ApprovalRequestJob } from '@gatehouse/contracts';
import type { Db } from '@gatehouse/ledger';
import { activateRelease, enableWrites } from '@gatehouse/operations';
import { createAction, seedFinishedRun } from '@gatehouse/testing';
import type { ReleaseSuite } from './release-suite.ts';

/**
 * Opens the canary the release tests start from, in `t`'s database and folders: rel-1 active for
 * everyone, rel-2 (a `candidate`) active for rep-ana's cohort, its canary analysis fed with
 * enough finished runs on both sides, and its writes enabled by ops-gus. `op` is the operator
 * and audit HMAC key the activations are recorded with.
 */
export async function openWritableCanary(t: ReleaseSuite, op: { operator: string; hmacKey: string }): Promise<void> {
  t.dirs.writeRelease('rel-1');
  t.dirs.writeRelease('rel-2', (m) => (m.description = 'candidate'));
  await activateRelease(t.db, 'rel-1', op);
  await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
  for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++) {
    await seedFinishedRun(t.db, { release: 'rel-1' });
    await seedFinishedRun(t.db, { release: 'rel-2' });
  }
  await enableWrites(t.db, 'rel-2', op.operator, op.hmacKey);
}

/**
 * A rel-2 refund of `cents` (integer cents) on O-1002 whose run waits for its lead's approval
 * (`awaiting_approval`, action `pending_approval` with the facts the approver is shown), and the
 * `approval-requests` job the gateway would queue for it — returned, not queued.
 */
export async function candidateRefund(db: Db, cents: number) {
  const a = await createAction(db, {
    orderId: 'O-1002',
    amountCents: cents,
    release: 'rel-2',
    approved: false,
    decision: 'REQUIRE_APPROVAL',
  });
  await db.updateTable('workflows').set({ state: 'awaiting_approval' }).where('id', '=', a.workflowId).execute();
  await db
    .updateTable('actions')
    .set({ status: 'pending_approval', facts: JSON.stringify({ orderPaidCents: 50000, requesterRegion: 'US', orderRegion: 'US' }) })
    .where('id', '=', a.actionId)
    .execute();
  const job = approvalRequestsQueue.schema.parse({ release: 'rel-2', workflowId: a.workflowId, actionId: a.actionId, actionVersion: 1 });
  return { ...a, job: job as ApprovalRequestJob };
}
