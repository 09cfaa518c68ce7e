import { STOP_REASONS } from '@gatehouse/contracts';
import { sql, type RawBuilder } from 'kysely';
import type { Db, Trx } from './db.ts';
import type { ActionStatus } from './schema.ts';
import { heldByContainment } from './containment.ts';
import { auditLossHoldColumn } from './audit-loss-hold.ts';

/**
 * The guards of workflow transitions (docs/product/states.md#transition-table): each is one
 * deterministic predicate over the ledger and the transition's input, written once as SQL
 * ({@link workflowGuardSql}) so the writer can put it in the WHERE of its conditional UPDATE
 * (docs/decisions/0390-guards-in-the-update.md) and a check can read it. A transition is written
 * only when its guard holds.
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

/** The guards of action transitions, each one predicate over the ledger (see {@link actionGuardSql}). */
export type ActionGuard =
  'approval_granted' | 'approval_refused' | 'unclaimed' | 'lease_granted' | 'outcome_recorded' | 'operation_reset' | 'remediated';

/** What a workflow guard reads besides the ledger. */
export interface WorkflowGuardInput {
  workflowId: string;
  stopReason?: string;
}

type Q = Trx | Db;

/** `exists (<query>)` as an SQL boolean. */
const exists = (q: { compile: unknown }): RawBuilder<boolean> => sql<boolean>`exists (${q as never})`;
const notExists = (q: { compile: unknown }): RawBuilder<boolean> => sql<boolean>`not exists (${q as never})`;

/** Function calls of the workflow without their `function_call_output`. */
function unansweredCall(db: Q, workflowId: string) {
  return db
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
const operationIn = (db: Q, workflowId: string, statuses: string[]) =>
  db
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
function heldBySwitch(db: Q, workflowId: string, statuses: ActionStatus[], unclaimedOnly: boolean) {
  let q = db
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

/**
 * Statuses of a `schedule_change` action that hold its plan's change as scheduled (live or
 * finished): a plan so named waits for nothing (guard `approval_awaited`), and the change is not
 * prepared or scheduled again in that workflow (policy change-c1 C2, ADR 0694). Superseded,
 * denied, failed and compensated (cancelled before start) schedules do not hold it.
 */
export const SCHEDULE_HOLDING_STATUSES = [
  'pending_approval',
  'approved',
  'running',
  'succeeded',
  'failed_unknown',
] as const satisfies readonly ActionStatus[];

/** A draft plan of the workflow (change pack) that no live or finished `schedule_change` names. */
function unscheduledPlan(db: Q, workflowId: string) {
  return db
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
            .where('a.status', 'in', [...SCHEDULE_HOLDING_STATUSES]),
        ),
      ),
    )
    .limit(1);
}

const actionIn = (db: Q, workflowId: string, statuses: ActionStatus[]) =>
  db.selectFrom('actions').select('id').where('workflow_id', '=', workflowId).where('status', 'in', statuses).limit(1);

/**
 * One workflow guard as an SQL boolean over the ledger (any statement of `db`'s transaction may
 * embed it):
 * - `all_calls_answered`: every function call of the run has its output (a new round may start);
 * - `action_to_execute`: an action of the run is approved or running;
 * - `held_tools_on`: no approved, unclaimed action of the run has its tool switched off;
 * - `approval_awaited`: an action waits for approval, or a draft plan awaits its schedule (change pack);
 * - `nothing_outstanding`: every call answered and no operation running or `failed_unknown`;
 * - `reconciled`: no operation of the run is running or `failed_unknown`;
 * - `stop_reason_known`: the stop reason is one of `STOP_REASONS` (docs/product/states.md#stop-reasons);
 * - `tool_switched_off`: an approved or running action of the run has its tool switched off, or
 *   the audit-loss hold is raised and an action of the run is approved or running (the executor
 *   pauses only for a consequential step; docs/decisions/0795);
 * - `outcome_unknown`: an operation of the run is `failed_unknown`.
 */
export function workflowGuardSql(db: Q, guard: WorkflowGuard, input: WorkflowGuardInput): RawBuilder<boolean> {
  const id = input.workflowId;
  switch (guard) {
    case 'all_calls_answered':
      return notExists(unansweredCall(db, id));
    case 'action_to_execute':
      return exists(actionIn(db, id, ['approved', 'running']));
    case 'held_tools_on':
      return notExists(heldBySwitch(db, id, ['approved'], true));
    case 'approval_awaited':
      return sql<boolean>`(${exists(actionIn(db, id, ['pending_approval']))} or ${exists(unscheduledPlan(db, id))})`;
    case 'nothing_outstanding':
      return sql<boolean>`(${notExists(unansweredCall(db, id))} and ${notExists(operationIn(db, id, ['running', 'failed_unknown']))})`;
    case 'reconciled':
      return notExists(operationIn(db, id, ['running', 'failed_unknown']));
    case 'stop_reason_known':
      return sql<boolean>`${sql.lit((STOP_REASONS as readonly string[]).includes(input.stopReason ?? ''))}`;
    case 'tool_switched_off':
      // Or held for a lost audit tail (ADR 0795): the hold is raised and a step of the run waits.
      return sql<boolean>`(${exists(heldBySwitch(db, id, ['approved', 'running'], false))}
        or (${auditLossHoldColumn} is not null and ${exists(actionIn(db, id, ['approved', 'running']))}))`;
    case 'outcome_unknown':
      return exists(operationIn(db, id, ['failed_unknown']));
  }
}

/** Evaluates one workflow guard ({@link workflowGuardSql}) in `trx`: one statement. */
export async function workflowGuardHolds(trx: Trx, guard: WorkflowGuard, input: WorkflowGuardInput): Promise<boolean> {
  const { rows } = await sql<{ holds: boolean }>`select ${workflowGuardSql(trx, guard, input)} as holds`.execute(trx);
  return rows[0]?.holds === true;
}

/** Operation statuses that record each action outcome (a key seen with another digest is a failure). */
const OUTCOME_OF: Partial<Record<ActionStatus, string[]>> = {
  succeeded: ['succeeded'],
  failed: ['failed'],
  denied: ['failed'],
  failed_unknown: ['failed_unknown'],
};

/** A column of the `actions` row the guard is evaluated on (the row being updated or selected). */
const row = (column: 'id' | 'operation_key' | 'digest') => sql.ref(`actions.${column}`);

/**
 * One action guard as an SQL boolean over the `actions` row it is evaluated on (the WHERE of an
 * `update actions`, or a `select … from actions`):
 * - `approval_granted` / `approval_refused`: an approval of this action is approved / denied or expired;
 * - `unclaimed`: no operation of this action has gone past `pending` (nothing may be in flight);
 * - `lease_granted`: the action's operation is `running` (the fenced claim was just written);
 * - `outcome_recorded`: the action's operation records the target outcome `to` (`succeeded`;
 *   `failed` for failed or denied, or the key seen with another digest — an idempotency conflict;
 *   `failed_unknown`);
 * - `operation_reset`: read-back proved nothing happened and the operation is `pending` again;
 * - `remediated`: a reconciliation item names the action's operation with a `reverse` remediation,
 *   or a change owner's cancel-before-start of it (`cancel_change`) succeeded at the change service.
 *
 * `operations` names the relation the guard reads the action's own operation from: the table, or
 * the CTE of the statement that just wrote it and returns its new row (every column), when the
 * action's move rides on that statement (docs/decisions/0530-action-moves-with-its-operation.md;
 * the statement's snapshot would still show the table's old row).
 */
export function actionGuardSql(guard: ActionGuard, to: ActionStatus, operations = 'operations'): RawBuilder<boolean> {
  const ops = sql.table(operations);
  const operationOf = (statuses: readonly string[]) =>
    sql<boolean>`exists (select 1 from ${ops} o where o.key = ${row('operation_key')} and o.status = any(${[...statuses]}::text[]))`;
  switch (guard) {
    case 'approval_granted':
    case 'approval_refused': {
      const statuses = guard === 'approval_granted' ? ['approved'] : ['denied', 'expired'];
      return sql<boolean>`exists (select 1 from approvals ap where ap.action_id = ${row('id')} and ap.status = any(${statuses}::text[]))`;
    }
    case 'unclaimed':
      return sql<boolean>`not exists (select 1 from ${ops} o where o.action_id = ${row('id')} and o.status <> 'pending')`;
    case 'lease_granted':
      return operationOf(['running']);
    case 'operation_reset':
      return operationOf(['pending']);
    case 'outcome_recorded': {
      const conflict = to === 'failed' ? sql`or o.action_digest <> ${row('digest')}` : sql``;
      return sql<boolean>`exists (select 1 from ${ops} o where o.key = ${row('operation_key')}
        and (o.status = any(${OUTCOME_OF[to] ?? []}::text[]) ${conflict}))`;
    }
    case 'remediated':
      return sql<boolean>`(exists (select 1 from reconciliation_items ri where ri.operation_key = ${row('operation_key')} and ri.remediation = 'reverse')
        or exists (select 1 from actions c join operations co on co.key = c.operation_key where c.tool = 'cancel_change'
          and c.arguments->>'operationKey' = ${row('operation_key')} and co.status = 'succeeded'))`;
  }
}
