import type { Selectable } from 'kysely';
import type { ResultJob, StopReason } from '@gatehouse/contracts';
import {
  approvalAwaitedStep,
  checkWorkingTime,
  endUnclaimedActions,
  inTransaction,
  LIVE_STATES,
  recordAudit,
  transitionWorkflow,
  type Db,
  type OutagePolicy,
  type OutboxRow,
  type Trx,
  type WorkflowState,
  type WorkflowsTable,
} from '@gatehouse/ledger';
import type { OutboxRelay } from '@gatehouse/platform';
import { startNextRound, unscheduledPlan } from '../domain/next-turn.ts';
import { unansweredCalls } from '../domain/transcript.ts';
import { stopWorkflow, TERMINAL_STATES } from '../domain/workflow-state.ts';

/**
 * A run left `executing` by an action that has now answered goes back to `awaiting_approval` when
 * all that is left of its live work is an approval a person has yet to give: an action
 * `pending_approval`, and none approved (queued) or running. Its next step names that action, as
 * when the approval was requested (`approvalAwaitedStep`); with several, the newest version.
 * Returns whether the run moved. The caller holds the workflow row lock (`state` is what it read).
 */
async function backToAwaitingApproval(trx: Trx, wf: { id: string; pack: string; state: WorkflowState }): Promise<boolean> {
  if (wf.state !== 'executing') return false;
  const live = await trx
    .selectFrom('actions')
    .select(['tool', 'target', 'version', 'status'])
    .where('workflow_id', '=', wf.id)
    .where('status', 'in', ['pending_approval', 'approved', 'running'])
    .orderBy('version')
    .execute();
  const awaited = live.at(-1);
  if (!awaited || live.some((a) => a.status !== 'pending_approval')) return false;
  await transitionWorkflow(trx, wf.id, { to: 'awaiting_approval', nextStep: approvalAwaitedStep(wf.pack, awaited), lockedFrom: wf.state });
  return true;
}

/** Failed validations in a row that stop a run with `stopped(validation_failed)` (docs/product/states.md#stop-reasons). */
export const MAX_CONSECUTIVE_INVALID = 3;

/** Gatehouse's own statuses of a result that did not execute (executor, gateway). */
const NOT_EXECUTED_STATUSES = new Set(['failed', 'denied', 'unknown', 'validation_failed']);

/**
 * The audit outcome of a result, from a fixed set: `succeeded` when it executed, else its
 * Gatehouse status (`failed`, `denied`, `unknown`, `validation_failed`) or `not_executed`. Never a
 * value of the tool's data: a tool result may carry its own `status` field (an order's status),
 * and what a tool returns never goes into the audit chain (docs/product/invariants.md#evidence).
 */
export function resultOutcome(output: Record<string, unknown>): string {
  if (output.executed === true) return 'succeeded';
  return typeof output.status === 'string' && NOT_EXECUTED_STATUSES.has(output.status) ? output.status : 'not_executed';
}

/**
 * Whether `output` is the policy gateway's validation result for a call: `status:
 * "validation_failed"` under Gatehouse's own label (`trust: "gatehouse"`). Only these count toward
 * the no-progress stop ({@link MAX_CONSECUTIVE_INVALID}). A tool's own data may carry a `status`
 * of any text (lookup_order's is the order system's status, untrusted), but never that label: the
 * output boundary writes the labels last (`toSafeOutput`), so no tool result can stop a run
 * (docs/product/invariants.md#untrusted-output).
 */
export function isFailedValidation(output: Record<string, unknown>): boolean {
  return output.trust === 'gatehouse' && output.status === 'validation_failed';
}

/**
 * Answers one function_call with its `function_call_output` (queue `results`), once per
 * call_id (a unique index makes redelivery a no-op). When every call of the transcript is
 * answered and the workflow is still live, the next model round is enqueued in the same
 * transaction. A `stop`/`park` outcome ends or parks the workflow instead.
 */
export async function processResult(job: ResultJob, deps: { db: Db; relay: OutboxRelay; outagePolicy: OutagePolicy }): Promise<string> {
  const done = await inTransaction(deps.db, async (trx): Promise<{ outcome: string; rows: OutboxRow[] }> => {
    const wf = await trx.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).forUpdate().executeTakeFirst();
    if (!wf) return { outcome: 'unknown_workflow', rows: [] };
    // Held through an outage (the ledger, say): that wait is not the run's working time either.
    const time = job.outage && !TERMINAL_STATES.has(wf.state) ? await checkWorkingTime(trx, wf.id, job.outage, deps.outagePolicy) : null;
    if (time?.kind === 'dependency_unavailable') {
      await stopWorkflow(trx, wf, 'dependency_unavailable', time.nextStep);
      return { outcome: 'stopped:dependency_unavailable', rows: [] };
    }
    if (!(await answerCall(trx, wf, job))) return { outcome: 'duplicate', rows: [] };
    // Counted on every answer (a result other than a failed validation resets the streak).
    const noProgress = await noProgressStop(trx, wf.id, job.output);
    const stop = job.stop ?? noProgress;
    if (job.park === 'needs_reconciliation') {
      await parkForReconciliation(trx, wf);
      return { outcome: 'parked', rows: [] };
    }
    if (stop && !TERMINAL_STATES.has(wf.state)) {
      await stopWorkflow(trx, wf, stop);
      return { outcome: `stopped:${stop}`, rows: [] };
    }
    if (TERMINAL_STATES.has(wf.state)) return { outcome: 'answered_terminal', rows: [] };
    return advanceRun(trx, wf);
  });
  await deps.relay.publish(done.rows);
  return done.outcome;
}

/**
 * Records `job`'s function_call_output for its call_id in the run's transcript (at most once: a
 * unique index makes a redelivery a no-op) and its `result.returned` audit event (the outcome
 * only, never the output). False when the call was already answered.
 */
async function answerCall(trx: Trx, wf: Selectable<WorkflowsTable>, job: ResultJob): Promise<boolean> {
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
  if (!inserted) return false;
  await recordAudit(trx, {
    type: 'result.returned',
    service: 'agent-loop',
    runId: wf.id,
    step: wf.round,
    callId: job.callId,
    outcome: resultOutcome(job.output),
    revisions: { release: wf.release_id },
  });
  return true;
}

/**
 * No-progress detection: counts failed validations ({@link isFailedValidation}) in a row in the run's budget (any other result
 * resets it); `validation_failed` once {@link MAX_CONSECUTIVE_INVALID} are reached, else undefined.
 */
async function noProgressStop(trx: Trx, workflowId: string, output: ResultJob['output']): Promise<StopReason | undefined> {
  // Gatehouse's own validation results only, never a tool's status text.
  const invalid = isFailedValidation(output);
  const streak = await trx
    .updateTable('budgets')
    .set((eb) => ({ consecutive_invalid: invalid ? eb('consecutive_invalid', '+', 1) : 0 }))
    .where('workflow_id', '=', workflowId)
    .returning('consecutive_invalid')
    .executeTakeFirst();
  return invalid && (streak?.consecutive_invalid ?? 0) >= MAX_CONSECUTIVE_INVALID ? 'validation_failed' : undefined;
}

/**
 * Parks the run in `needs_reconciliation` (an effect's outcome is unknown). A parked run claims
 * nothing more: what it had not started ends (ADR 0610) — before the move (the state was read
 * under the run's lock), so the parked event shows it ended; a move the table refuses throws and
 * rolls back.
 */
async function parkForReconciliation(trx: Trx, wf: Selectable<WorkflowsTable>): Promise<void> {
  const parksFrom: WorkflowState[] = [...LIVE_STATES, 'stopped'];
  if (parksFrom.includes(wf.state)) await endUnclaimedActions(trx, wf, 'run_parked', 'agent-loop');
  await transitionWorkflow(trx, wf.id, {
    to: 'needs_reconciliation',
    nextStep: 'An effect has an unknown outcome; on-call must run `gatehouse reconcile` before anything is retried.',
    onlyFrom: parksFrom,
    lockedFrom: wf.state,
  });
}

/**
 * A live run whose call was answered: it waits while another call is unanswered or an approval is
 * open (back in `awaiting_approval` when nothing else of it runs); otherwise its next model round
 * is enqueued (a change run with a prepared, unscheduled plan waits for that plan's approval).
 */
async function advanceRun(trx: Trx, wf: Selectable<WorkflowsTable>): Promise<{ outcome: string; rows: OutboxRow[] }> {
  // The common case, nothing left, reads no more.
  const otherCalls = (await unansweredCalls(trx, wf.id)).length > 0;
  const openApprovals =
    !otherCalls &&
    (
      await trx
        .selectFrom('approvals')
        .select('id')
        .where('workflow_id', '=', wf.id)
        .where('status', 'in', ['pending', 'approved'])
        .execute()
    ).length > 0;
  if (otherCalls || openApprovals) {
    const awaiting = await backToAwaitingApproval(trx, wf);
    return { outcome: awaiting || openApprovals ? 'waiting_for_approval' : 'waiting_for_other_calls', rows: [] };
  }
  const planReady = wf.pack === 'change' ? await unscheduledPlan(trx, wf.id) : null;
  return { outcome: 'next_turn', rows: [await startNextRound(trx, wf, planReady)] };
}
