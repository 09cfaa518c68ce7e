import { AS_A_NEW_TICKET } from '@gatehouse/contracts';
import { inTransaction, type Db, type Trx } from './db.ts';
import { isTerminal, type WorkflowState } from './schema.ts';
import { transitionWorkflow, type WorkflowTransitionInput } from './transitions.ts';
import { endUnclaimedActions } from './unclaimed-actions.ts';

/**
 * The one way a workflow stops: moves it to `stopped(reason)` with the rep's next step and a
 * `run.stopped` audit event (outcome = reason, the run's release), in the caller's transaction,
 * through {@link transitionWorkflow} — whose table refuses a stop without that event — and ends
 * the run's unclaimed actions and their approvals (`endUnclaimedActions`). Without
 * `wf.release_id` the run's row is read under its lock first (lock order: workflows first).
 * `opts.onlyFrom` stops only from those states (else nothing changes and null is returned).
 * Returns the state the run left, or null.
 * @throws IllegalTransition when the run cannot stop from its state (already `completed` or `stopped`).
 */
export async function stopRun(
  trx: Trx,
  wf: { id: string; release_id?: string },
  reason: string,
  nextStep: string,
  service: string,
  opts: Pick<WorkflowTransitionInput, 'onlyFrom' | 'lockedFrom'> = {},
): Promise<WorkflowState | null> {
  let from = opts.lockedFrom;
  let release = wf.release_id;
  const excluded = (state: WorkflowState) => opts.onlyFrom !== undefined && !opts.onlyFrom.includes(state);
  // The state under the run's lock (lock order: workflows first): the read the transition would
  // otherwise make itself, made here because the unclaimed actions end before the move.
  if (release === undefined || from === undefined || excluded(from)) {
    const row = await trx.selectFrom('workflows').select(['state', 'release_id']).where('id', '=', wf.id).forUpdate().executeTakeFirst();
    if (!row) return null;
    [release, from] = [release ?? row.release_id, row.state];
  }
  if (excluded(from)) return null;
  // What the stopped run will never run ends with it: no leftover counts against a limit (ADR
  // 0610). Before the move, so the run's terminal event (SSE, webhooks) shows those actions and
  // approvals ended, as GET /v1/workflows/:id does; a move the table refuses throws and rolls back.
  if (!isTerminal(from)) await endUnclaimedActions(trx, { id: wf.id, release_id: release }, 'run_stopped', service);
  return transitionWorkflow(trx, wf.id, {
    to: 'stopped',
    stopReason: reason,
    nextStep,
    ...(opts.onlyFrom ? { onlyFrom: opts.onlyFrom } : {}),
    lockedFrom: from,
    audit: { type: 'run.stopped', service, outcome: reason, revisions: { release } },
  });
}

/** Stop reason of a run whose step failed its last queue attempt (see {@link stopRunOnFailedStep}). */
export const STEP_FAILED = 'step_failed';

/**
 * The dead letter of a workflow step: a job of `queue` failed its last attempt (BullMQ gives up),
 * so nothing will drive the run again. Unless the run is already terminal, it moves to
 * `stopped(step_failed)` with a next step for on-call, and a `run.stopped` audit event says so —
 * an explicit state instead of a run that waits forever. What already ran stays in its actions.
 * Returns true when it stopped the run.
 * @throws the database error when the ledger cannot be written (the caller logs it).
 */
export async function stopRunOnFailedStep(db: Db, workflowId: string, queue: string, service: string): Promise<boolean> {
  return inTransaction(db, async (trx) => {
    const wf = await trx
      .selectFrom('workflows')
      .select(['id', 'state', 'release_id'])
      .where('id', '=', workflowId)
      .forUpdate()
      .executeTakeFirst();
    if (!wf || isTerminal(wf.state)) return false;
    const nextStep = `A step of this run failed every retry (${queue}); on-call should check the ${service} logs. See the actions for what already ran, then resubmit the rest ${AS_A_NEW_TICKET}.`;
    await stopRun(trx, wf, STEP_FAILED, nextStep, service);
    return true;
  });
}
