import { beforeAll, describe, expect, it } from 'vitest';
import { approvalRequestsQueue, queueName, reconcileQueue, type ApprovalRequestJob } from '@gatehouse/contracts';
import type { OutboxRelay } from '@gatehouse/platform';
import { loadActiveBundles } from '@gatehouse/policy';
import { enableWrites, quarantineRelease, requeueRelease, rollbackRelease } from '@gatehouse/operations';
import { approvalApi } from '../support/approval-api.ts';
import { useReleaseSuite } from '../support/release-suite.ts';
import { candidateRefund as candidateRefundOf, openWritableCanary } from '../support/writable-canary.ts';
import { processApprovalRequest, sweepExpiredApprovals } from '@gatehouse/approval';

// docs/product/releases.md: after a rollback to F, `queues requeue --from C --to F` moves C's
// queued jobs and their runs to F, "so their next jobs are F's". What the approval service starts
// for such a run — the approval it opens, the execution an approval grants, the answer an expired
// approval gives — must go to F's queues, where workers run, not to C's drained ones.

const HMAC = 'test-audit-hmac-key-0123456789';
const op = { operator: 'ops-gus', hmacKey: HMAC };
const noRelay = { publish: async () => {} } as unknown as OutboxRelay;
const t = useReleaseSuite();

beforeAll(() => openWritableCanary(t, op));

const candidateRefund = (cents: number) => candidateRefundOf(t.db, cents);

/** The release each outbox row of `queue` (`executions`, `results`) of the run was written for. */
async function outboxReleases(base: string, workflowId: string): Promise<string[]> {
  const rows = await t.db.selectFrom('outbox').select(['queue', 'payload']).where('queue', 'like', `${base}.%`).execute();
  return rows.filter((r) => (r.payload as { workflowId?: string }).workflowId === workflowId).map((r) => r.queue);
}

describe('after rollback and requeue, the approval service works on the former release', () => {
  it('an approval opened for a requeued run carries rel-1, and granting it queues the execution on rel-1', async () => {
    const a = await candidateRefund(12000);
    await t.queues.get(queueName('approval-requests', 'rel-2')).add(approvalRequestsQueue.jobName, a.job as never, {
      jobId: approvalRequestsQueue.jobId(a.job as never),
    });
    expect((await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'canary denials doubled', ...op })).rolledBack).toEqual(['rel-2']);
    await enableWrites(t.db, 'rel-1', 'ops-gus', HMAC);
    expect((await requeueRelease(t.db, t.queues, 'rel-2', 'rel-1', op)).moved).toBe(1);

    const [moved] = await t.queues.get(queueName('approval-requests', 'rel-1')).getJobs(['waiting', 'paused', 'delayed', 'prioritized']);
    const bundles = loadActiveBundles({ support: 'support-p1', change: 'change-c1' });
    expect(await processApprovalRequest(moved!.data as ApprovalRequestJob, { db: t.db, bundles })).toBe('opened');
    const approval = await t.db.selectFrom('approvals').selectAll().where('action_id', '=', a.actionId).executeTakeFirstOrThrow();
    expect(approval.release_id).toBe('rel-1');
    expect((await approvalApi(t.db).decide('lead-eli', approval.id)).status).toBe(200);
    expect(await outboxReleases('executions', a.workflowId)).toEqual(['executions.rel-1']);
  }, 120_000);

  it('an approval of rel-2 that expires after its run was moved to rel-1 answers the run on rel-1', async () => {
    const a = await candidateRefund(13000);
    const bundles = loadActiveBundles({ support: 'support-p1', change: 'change-c1' });
    expect(await processApprovalRequest(a.job, { db: t.db, bundles })).toBe('opened'); // opened while on rel-2
    // On-call moved the run to rel-1 (requeue) before the sweep saw the approval expire.
    await t.db.updateTable('workflows').set({ release_id: 'rel-1' }).where('id', '=', a.workflowId).execute();
    await t.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('action_id', '=', a.actionId)
      .execute();
    expect(await sweepExpiredApprovals({ db: t.db, relay: noRelay })).toBeGreaterThanOrEqual(1);
    expect(await outboxReleases('results', a.workflowId)).toEqual(['results.rel-1']);
  }, 60_000);

  it("the candidate's scheduled reconcile job is neither requeued nor quarantined, and neither command fails on it", async () => {
    const reconcile = t.queues.get(queueName(reconcileQueue.base, 'rel-2'));
    await reconcile.upsertJobScheduler(
      'reconcile-every',
      { every: 60_000 },
      { name: reconcileQueue.jobName, data: { release: 'rel-2', trigger: 'schedule' }, opts: reconcileQueue.options },
    );
    const scheduled = async () => (await reconcile.getJobs(['delayed', 'waiting', 'paused'])).filter((j) => j.repeatJobKey).length;
    expect(await scheduled()).toBe(1);
    const a = await candidateRefund(14000);
    await t.queues.get(queueName('approval-requests', 'rel-2')).add(approvalRequestsQueue.jobName, a.job as never, {
      jobId: approvalRequestsQueue.jobId(a.job as never),
    });
    expect(await requeueRelease(t.db, t.queues, 'rel-2', 'rel-1', op)).toMatchObject({ moved: 1, refused: 0 });
    expect((await quarantineRelease(t.db, t.queues, 'rel-2', op)).jobs).toBe(0);
    expect(await scheduled()).toBe(1);
    await reconcile.removeJobScheduler('reconcile-every');
  }, 60_000);
});
