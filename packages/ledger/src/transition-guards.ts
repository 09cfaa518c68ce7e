import { STOP_REASONS } from '@gatehouse/contracts';
import { sql } from 'kysely';
import type { Trx } from './db.ts';
import type { ActionStatus } from './schema.ts';
import { heldByContainment } from './containment.ts';

/**
 * The guards of workflow transitions (docs/product/states.md#transition-table): each is one
 * deterministic predicate over the ledger (read in the caller's transaction, after the row lock)
 * and the transition's input. A transition is written only when its guard holds.
 */
export type WorkflowGuard =
  | 'all_calls_answered'
  | 'action_to_execute'
  | 'held_tools_on'
  | 'approval_awaited'
  | 'nothing_outstanding'
  | 'reconciled'
  | 'stop_reason_known'
  | 'tool_switched_off'
  | 'outcome_unknown';

/** The guards of action transitions, each one predicate over the ledger (see {@link actionGuardHolds}). */
export type ActionGuard =
  'approval_granted' | 'approval_refused' | 'unclaimed' | 'lease_granted' | 'outcome_recorded' | 'operation_reset' | 'remediated';

/** What a workflow guard reads besides the ledger. */
export interface WorkflowGuardInput {
  workflowId: string;
  stopReason?: string;
}

const exists = async (q: { executeTakeFirst: () => Promise<unknown> }): Promise<boolean> => (await q.executeTakeFirst()) !== undefined;

/** Function calls of the workflow without their `function_call_output`. */
function unansweredCall(trx: Trx, workflowId: string) {
  return trx
    .selectFrom('conversation_items as c')
    .select('c.id')
    .where('c.workflow_id', '=', workflowId)
    .where('c.kind', '=', 'function_call')
    .where(({ not, exists: ex, selectFrom }) =>
      not(
        ex(
          selectFrom('conversation_items as o')
            .select('o.id')
            .whereRef('o.workflow_id', '=', 'c.workflow_id')
            .whereRef('o.call_id', '=', 'c.call_id')
            .where('o.kind', '=', 'function_call_output'),
        ),
      ),
    )
    .limit(1);
}

/** An operation of the workflow in one of `statuses`. */
const operationIn = (trx: Trx, workflowId: string, statuses: string[]) =>
  trx
    .selectFrom('operations')
    .select('key')
    .where('workflow_id', '=', workflowId)
    .where('status', 'in', statuses as never)
    .limit(1);

/**
 * Actions of the workflow held by containment: approved or running, their tool's switch off and
 * no open cohort stage admitting the workflow ({@link heldByContainment}), and (with
 * `unclaimedOnly`) no operation past `pending` — the steps the executor holds.
 */
function heldBySwitch(trx: Trx, workflowId: string, statuses: ActionStatus[], unclaimedOnly: boolean) {
  let q = trx
    .selectFrom('actions as a')
    .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
    .leftJoin('operations as o', 'o.action_id', 'a.id')
    .select('a.id')
    .where('a.workflow_id', '=', workflowId)
    .where('a.status', 'in', statuses)
    .where(heldByContainment(sql.ref('a.tool'), sql.ref('w.tenant'), sql.ref('w.user_id')));
  if (unclaimedOnly) q = q.where((eb) => eb.or([eb('o.key', 'is', null), eb('o.status', '=', 'pending')]));
  return q.limit(1);
}

/** A draft plan of the workflow (change pack) that no live or finished `schedule_change` names. */
function unscheduledPlan(trx: Trx, workflowId: string) {
  return trx
    .selectFrom('change_plans as p')
    .select('p.id')
    .where('p.workflow_id', '=', workflowId)
    .where(({ not, exists: ex, selectFrom }) =>
      not(
        ex(
          selectFrom('actions as a')
            .select('a.id')
            .whereRef('a.workflow_id', '=', 'p.workflow_id')
            .whereRef('a.target', '=', 'p.id')
            .where('a.tool', '=', 'schedule_change')
            .where('a.status', 'in', ['pending_approval', 'approved', 'running', 'succeeded', 'failed_unknown']),
        ),
      ),
    )
    .limit(1);
}

const actionIn = (trx: Trx, workflowId: string, statuses: ActionStatus[]) =>
  trx.selectFrom('actions').select('id').where('workflow_id', '=', workflowId).where('status', 'in', statuses).limit(1);

/**
 * Evaluates one workflow guard:
 * - `all_calls_answered`: every function call of the run has its output (a new round may start);
 * - `action_to_execute`: an action of the run is approved or running;
 * - `held_tools_on`: no approved, unclaimed action of the run has its tool switched off;
 * - `approval_awaited`: an action waits for approval, or a draft plan awaits its schedule (change pack);
 * - `nothing_outstanding`: every call answered and no operation running or `failed_unknown`;
 * - `reconciled`: no operation of the run is running or `failed_unknown`;
 * - `stop_reason_known`: the stop reason is one of `STOP_REASONS` (docs/product/states.md#stop-reasons);
 * - `tool_switched_off`: an approved or running action of the run has its tool switched off;
 * - `outcome_unknown`: an operation of the run is `failed_unknown`.
 */
export async function workflowGuardHolds(trx: Trx, guard: WorkflowGuard, input: WorkflowGuardInput): Promise<boolean> {
  const id = input.workflowId;
  switch (guard) {
    case 'all_calls_answered':
      return !(await exists(unansweredCall(trx, id)));
    case 'action_to_execute':
      return exists(actionIn(trx, id, ['approved', 'running']));
    case 'held_tools_on':
      return !(await exists(heldBySwitch(trx, id, ['approved'], true)));
    case 'approval_awaited':
      return (await exists(actionIn(trx, id, ['pending_approval']))) || exists(unscheduledPlan(trx, id));
    case 'nothing_outstanding':
      return !(await exists(unansweredCall(trx, id))) && !(await exists(operationIn(trx, id, ['running', 'failed_unknown'])));
    case 'reconciled':
      return !(await exists(operationIn(trx, id, ['running', 'failed_unknown'])));
    case 'stop_reason_known':
      return (STOP_REASONS as readonly string[]).includes(input.stopReason ?? '');
    case 'tool_switched_off':
      return exists(heldBySwitch(trx, id, ['approved', 'running'], false));
    case 'outcome_unknown':
      return exists(operationIn(trx, id, ['failed_unknown']));
  }
}

/** The action row fields an action guard reads. */
export interface ActionGuardRow {
  id: string;
  operation_key: string;
  digest: string;
}

/** Operation statuses that record each action outcome (a key seen with another digest is a failure). */
const OUTCOME_OF: Partial<Record<ActionStatus, string[]>> = {
  succeeded: ['succeeded'],
  failed: ['failed'],
  denied: ['failed'],
  failed_unknown: ['failed_unknown'],
};

/**
 * Evaluates one action guard:
 * - `approval_granted` / `approval_refused`: an approval of this action is approved / denied or expired;
 * - `unclaimed`: no operation of this action has gone past `pending` (nothing may be in flight);
 * - `lease_granted`: the action's operation is `running` (the fenced claim was just written);
 * - `outcome_recorded`: the action's operation records the target outcome (`succeeded`;
 *   `failed` for failed or denied, or the key seen with another digest — an idempotency conflict;
 *   `failed_unknown`);
 * - `operation_reset`: read-back proved nothing happened and the operation is `pending` again;
 * - `remediated`: a reconciliation item names the action's operation with a `reverse` remediation,
 *   or a change owner's cancel-before-start of it (`cancel_change`) succeeded at the change service.
 */
export async function actionGuardHolds(trx: Trx, guard: ActionGuard, action: ActionGuardRow, to: ActionStatus): Promise<boolean> {
  const op = () =>
    trx.selectFrom('operations').select(['status', 'action_digest']).where('key', '=', action.operation_key).executeTakeFirst();
  switch (guard) {
    case 'approval_granted':
    case 'approval_refused': {
      const statuses = guard === 'approval_granted' ? ['approved'] : ['denied', 'expired'];
      return exists(
        trx
          .selectFrom('approvals')
          .select('id')
          .where('action_id', '=', action.id)
          .where('status', 'in', statuses as never)
          .limit(1),
      );
    }
    case 'unclaimed':
      return !(await exists(
        trx.selectFrom('operations').select('key').where('action_id', '=', action.id).where('status', '!=', 'pending').limit(1),
      ));
    case 'lease_granted':
      return (await op())?.status === 'running';
    case 'operation_reset':
      return (await op())?.status === 'pending';
    case 'outcome_recorded': {
      const o = await op();
      if (!o) return false;
      if (to === 'failed' && o.action_digest !== action.digest) return true;
      return (OUTCOME_OF[to] ?? []).includes(o.status);
    }
    case 'remediated':
      return (
        (await exists(
          trx
            .selectFrom('reconciliation_items')
            .select('id')
            .where('operation_key', '=', action.operation_key)
            .where('remediation', '=', 'reverse')
            .limit(1),
        )) ||
        exists(
          trx
            .selectFrom('actions as c')
            .innerJoin('operations as co', 'co.key', 'c.operation_key')
            .select('c.id')
            .where('c.tool', '=', 'cancel_change')
            .where(sql<boolean>`c.arguments->>'operationKey' = ${action.operation_key}`)
            .where('co.status', '=', 'succeeded')
            .limit(1),
        )
      );
  }
}
