import { SCHEDULE_HOLDING_STATUSES, type Trx } from '@gatehouse/ledger';

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
