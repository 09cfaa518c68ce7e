import { turnsQueue } from '@gatehouse/contracts';
import {
  enqueueInTransaction,
  SCHEDULE_HOLDING_STATUSES,
  transitionWorkflow,
  type OutboxRow,
  type Trx,
  type WorkflowState,
} from '@gatehouse/ledger';

/**
 * Change pack (docs/product/users-and-tools.md#change-pack): the latest plan `prepare_change` produced in this workflow when no
 * `schedule_change` of it is live or done — the workflow then takes its next turn in
 * `awaiting_approval`, the only state that offers `schedule_change`. Null otherwise. Read by the
 * last result of a round and by a follow-up message (docs/decisions/0677-a-follow-up-keeps-a-prepared-plan-schedulable.md).
 */
export async function unscheduledPlan(trx: Trx, workflowId: string): Promise<string | null> {
  const plan = await trx
    .selectFrom('change_plans')
    .select('id')
    .where('workflow_id', '=', workflowId)
    .orderBy('created_at', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (!plan) return null;
  const scheduled = await trx
    .selectFrom('actions')
    .select('id')
    .where('workflow_id', '=', workflowId)
    .where('tool', '=', 'schedule_change')
    .where('target', '=', plan.id)
    .where('status', 'in', [...SCHEDULE_HOLDING_STATUSES])
    .executeTakeFirst();
  return scheduled ? null : plan.id;
}

/** The next step of a run whose prepared plan `planId` waits for the agent to propose its schedule. */
export function planPreparedStep(planId: string): string {
  return `Plan ${planId} is prepared; the agent proposes scheduling it for a change owner's approval.`;
}

/**
 * Starts the run's next model round, in the caller's transaction (which holds the run's lock and
 * read `wf.state` under it): the run moves to `awaiting_approval` with `planReady`'s next step when
 * a change plan waits for its schedule ({@link unscheduledPlan}), else to `investigating`; the
 * round's job is returned as an outbox row to publish after commit.
 * @throws IllegalTransition when the run's state allows neither move (the transaction rolls back).
 */
export async function startNextRound(
  trx: Trx,
  wf: { id: string; state: WorkflowState; round: number; release_id: string },
  planReady: string | null,
): Promise<OutboxRow> {
  await transitionWorkflow(
    trx,
    wf.id,
    planReady
      ? { to: 'awaiting_approval', nextStep: planPreparedStep(planReady), lockedFrom: wf.state }
      : { to: 'investigating', nextStep: null, lockedFrom: wf.state },
  );
  return enqueueInTransaction(trx, turnsQueue, { release: wf.release_id, workflowId: wf.id, round: wf.round + 1 });
}
