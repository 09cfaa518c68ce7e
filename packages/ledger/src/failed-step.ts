import { inTransaction, type Db, type Trx } from './db.ts';
import { isTerminal } from './schema.ts';
import { transitionWorkflow } from './transitions.ts';

/**
 * Moves a workflow to `stopped(reason)` with the rep's next step and a `run.stopped` audit event
 * (outcome = reason), in the caller's transaction, through {@link transitionWorkflow}.
 * @throws IllegalTransition when the run is already `completed` or `stopped`.
 */
export async function stopRun(
  trx: Trx,
  wf: { id: string; release_id: string },
  reason: string,
  nextStep: string,
  service: string,
): Promise<void> {
  await transitionWorkflow(trx, wf.id, {
    to: 'stopped',
    stopReason: reason,
    nextStep,
    audit: { type: 'run.stopped', service, outcome: reason, revisions: { release: wf.release_id } },
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
    const nextStep = `A step of this run failed every retry (${queue}); on-call should check the ${service} logs. See the actions for what already ran, then resubmit the rest.`;
    await stopRun(trx, wf, STEP_FAILED, nextStep, service);
    return true;
  });
}
