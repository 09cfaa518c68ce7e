import type { ResultJob } from '@gatehouse/contracts';
import { turnsQueue } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction, recordAudit, type Db, type OutboxRow } from '@gatehouse/ledger';
import type { OutboxRelay } from '@gatehouse/platform';
import { unansweredCalls } from '../domain/transcript.ts';
import { NEXT_STEP, TERMINAL_STATES } from '../domain/workflow-state.ts';

/**
 * Answers one function_call with its `function_call_output` (queue `results`), once per
 * call_id (a unique index makes redelivery a no-op). When every call of the transcript is
 * answered and the workflow is still live, the next model round is enqueued in the same
 * transaction. A `stop`/`park` outcome ends or parks the workflow instead.
 */
export async function processResult(job: ResultJob, deps: { db: Db; relay: OutboxRelay }): Promise<string> {
  const rows = await inTransaction(deps.db, async (trx) => {
    const wf = await trx.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).forUpdate().executeTakeFirst();
    if (!wf) return { outcome: 'unknown_workflow', rows: [] as OutboxRow[] };
    const inserted = await trx
      .insertInto('conversation_items')
      .values({
        workflow_id: wf.id,
        round: wf.round,
        kind: 'function_call_output',
        call_id: job.callId,
        item: JSON.stringify({ type: 'function_call_output', call_id: job.callId, output: JSON.stringify(job.output) }),
      })
      .onConflict((oc) => oc.columns(['workflow_id', 'kind', 'call_id']).where('call_id', 'is not', null).doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!inserted) return { outcome: 'duplicate', rows: [] as OutboxRow[] };
    await recordAudit(trx, {
      type: 'result.returned',
      service: 'agent-loop',
      runId: wf.id,
      step: wf.round,
      callId: job.callId,
      outcome: typeof job.output.status === 'string' ? job.output.status : null,
      revisions: { release: wf.release_id },
    });
    if (job.park === 'needs_reconciliation') {
      await trx
        .updateTable('workflows')
        .set({
          state: 'needs_reconciliation',
          next_step: 'An effect has an unknown outcome; on-call must run `gatehouse reconcile` before anything is retried.',
          updated_at: new Date(),
        })
        .where('id', '=', wf.id)
        .execute();
      return { outcome: 'parked', rows: [] as OutboxRow[] };
    }
    if (job.stop) {
      await trx
        .updateTable('workflows')
        .set({ state: 'stopped', stop_reason: job.stop, next_step: NEXT_STEP[job.stop], updated_at: new Date() })
        .where('id', '=', wf.id)
        .execute();
      await recordAudit(trx, {
        type: 'run.stopped',
        service: 'agent-loop',
        runId: wf.id,
        outcome: job.stop,
        revisions: { release: wf.release_id },
      });
      return { outcome: `stopped:${job.stop}`, rows: [] as OutboxRow[] };
    }
    if (TERMINAL_STATES.has(wf.state)) return { outcome: 'answered_terminal', rows: [] as OutboxRow[] };
    if ((await unansweredCalls(trx, wf.id)).length) return { outcome: 'waiting_for_other_calls', rows: [] as OutboxRow[] };
    const pendingApprovals = await trx
      .selectFrom('approvals')
      .select('id')
      .where('workflow_id', '=', wf.id)
      .where('status', 'in', ['pending', 'approved'])
      .execute();
    if (pendingApprovals.length) return { outcome: 'waiting_for_approval', rows: [] as OutboxRow[] };
    await trx.updateTable('workflows').set({ state: 'investigating', updated_at: new Date() }).where('id', '=', wf.id).execute();
    const row = await enqueueInTransaction(trx, turnsQueue, { release: wf.release_id, workflowId: wf.id, round: wf.round + 1 });
    return { outcome: 'next_turn', rows: [row] };
  });
  await deps.relay.publish(rows.rows);
  return rows.outcome;
}
