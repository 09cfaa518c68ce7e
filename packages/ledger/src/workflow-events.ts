import { sql, type ExpressionBuilder, type RawBuilder, type Selectable } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import type { WorkflowView } from '@gatehouse/contracts';
import type { Db, Trx } from './db.ts';
import { TERMINAL_STATES, type ActionsTable, type ApprovalsTable, type DB, type WorkflowState } from './schema.ts';

/** Postgres channel an insert into `workflow_events` notifies (payload `<workflowId>:<seq>`, at commit; migration 20261201000300). */
export const WORKFLOW_EVENTS_CHANNEL = 'gatehouse_workflow_events';

/** An action as the workflow read (`GET /v1/workflows/:id`) shows it: the public contract's type. */
export type ActionView = WorkflowView['actions'][number];

/** An open (pending or approved, not yet used) approval as the workflow read shows it (`expiresAt` ISO 8601). */
export type ApprovalView = WorkflowView['pendingApprovals'][number];

/**
 * The two JSON arrays the actions view is built from — the run's actions by version and its open
 * approvals — as select expressions of any statement (timestamps arrive as ISO text), for
 * {@link readActionsView}. An event's summary of the same rows is built in SQL by
 * {@link workflowEventCtes} (ADR 0540).
 */
export function actionsViewColumns(eb: ExpressionBuilder<DB, never>, workflowId: string) {
  return [
    jsonArrayFrom(eb.selectFrom('actions').selectAll().where('workflow_id', '=', workflowId).orderBy('version')).as('view_actions'),
    jsonArrayFrom(
      eb
        .selectFrom('approvals')
        .select(['id', 'action_id', 'action_version', 'action_digest', 'status', 'expires_at', 'rule_id'])
        .where('workflow_id', '=', workflowId)
        .where('status', 'in', ['pending', 'approved'])
        .orderBy('created_at'),
    ).as('view_approvals'),
  ] as const;
}

/** What {@link actionsViewColumns} returns, as it arrives from the driver. */
export type RawActionsView = {
  view_actions: Array<Selectable<ActionsTable>>;
  view_approvals: Array<
    Pick<Selectable<ApprovalsTable>, 'id' | 'action_id' | 'action_version' | 'action_digest' | 'status' | 'expires_at' | 'rule_id'>
  >;
};

/** The actions view from its raw JSON arrays ({@link actionsViewColumns}). */
export function toActionsView(raw: RawActionsView): { actions: ActionView[]; pendingApprovals: ApprovalView[] } {
  return {
    actions: raw.view_actions.map((a) => ({
      actionId: a.id,
      callId: a.call_id,
      tool: a.tool,
      target: a.target,
      arguments: a.arguments,
      version: a.version,
      supersedesVersion: a.supersedes_version,
      digest: a.digest,
      decision: a.decision,
      ruleId: a.rule_id,
      policyRevision: a.policy_revision,
      status: a.status,
      operationKey: a.operation_key,
    })),
    pendingApprovals: raw.view_approvals.map((p) => ({
      approvalId: p.id,
      actionId: p.action_id,
      actionVersion: p.action_version,
      actionDigest: p.action_digest,
      status: p.status as 'pending' | 'approved',
      ruleId: p.rule_id,
      expiresAt: new Date(p.expires_at).toISOString(),
    })),
  };
}

/**
 * The actions and open approvals of a workflow, as `GET /v1/workflows/:id` shows them (actions by
 * version), in one round trip. The read and every workflow event build on it.
 */
export async function readActionsView(
  db: Db | Trx,
  workflowId: string,
): Promise<{ actions: ActionView[]; pendingApprovals: ApprovalView[] }> {
  const raw = await db.selectNoFrom((eb) => actionsViewColumns(eb as ExpressionBuilder<DB, never>, workflowId)).executeTakeFirstOrThrow();
  return toActionsView(raw as unknown as RawActionsView);
}

/** The workflow columns an event is built from, as {@link recordWorkflowEvent} and the transition writer return them. */
export const EVENT_SOURCE_COLUMNS = ['id', 'tenant', 'ticket_id', 'state', 'stop_reason', 'next_step', 'event_seq', 'release_id'] as const;

/**
 * `workflows.release_id` of a release override's run (packages/operations, ADR 0230): no
 * deployment serves it, so no watchdog drives it and no canary analysis counts it. Such a run is
 * the platform's, not its requesting operator's tenant's: its events are stored, but no tenant's
 * webhook is sent them (docs/decisions/0769-a-platform-run-is-no-tenant-s-webhook-event.md).
 */
export const OVERRIDE_RUN_RELEASE = 'release-override';

/** A CTE of the same statement that moves actions, returning `id` and the new `status` of each. */
export interface RidingActionMove {
  cte: string;
}

/** An instant as JSON shows it: ISO 8601 in UTC with milliseconds, as `Date.prototype.toISOString` writes it. */
const isoInstant = (instant: RawBuilder<unknown>) => sql<string>`to_char(${instant} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * The `WorkflowEvent` of the workflow row `w` (packages/contracts/src/api/events.ts: state, stop
 * reason, next step, the action summary by version and the open approvals — no arguments, no
 * digest, no model text), as one jsonb expression. The view is read on the statement's snapshot:
 * every earlier write of the transaction, and none of the statement's own other CTEs — except
 * `moved`, an action move riding on the same statement, whose new status the view shows.
 */
function eventPayloadSql(previousState: WorkflowState | null, moved?: RidingActionMove): RawBuilder<unknown> {
  const status = moved ? sql`coalesce((select m.status from ${sql.table(moved.cte)} m where m.id = a.id), a.status)` : sql`a.status`;
  const actions = sql`(select coalesce(jsonb_agg(jsonb_build_object('actionId', a.id, 'tool', a.tool, 'target', a.target,
      'version', a.version, 'decision', a.decision, 'ruleId', a.rule_id, 'status', ${status}) order by a.version), '[]'::jsonb)
    from actions a where a.workflow_id = w.id)`;
  const approvals = sql`(select coalesce(jsonb_agg(jsonb_build_object('approvalId', p.id, 'actionId', p.action_id,
      'actionVersion', p.action_version, 'status', p.status, 'ruleId', p.rule_id, 'expiresAt', ${isoInstant(sql`p.expires_at`)})
      order by p.created_at), '[]'::jsonb)
    from approvals p where p.workflow_id = w.id and p.status in ('pending', 'approved'))`;
  return sql`jsonb_build_object('type', 'workflow.updated', 'workflowId', w.id, 'ticketId', w.ticket_id, 'seq', w.event_seq,
    'state', w.state, 'previousState', ${previousState}::text, 'terminal', w.state = any(${[...TERMINAL_STATES]}::text[]),
    'stopReason', w.stop_reason, 'nextStep', w.next_step, 'actions', ${actions}, 'pendingApprovals', ${approvals},
    'at', ${isoInstant(sql`clock_timestamp()`)})`;
}

/**
 * The two data-modifying CTEs that store a workflow's event, for a statement whose CTE `source`
 * returns {@link EVENT_SOURCE_COLUMNS} of the workflow with its `event_seq` just bumped
 * (docs/decisions/0250-pushed-workflow-events.md, ADR 0540): `workflow_event` inserts the event
 * (built in SQL, {@link eventPayloadSql}; returns `seq`), `event_deliveries` one pending webhook
 * delivery per active endpoint of the tenant, with the exact body every attempt will sign (the
 * stored event's text) — none for a release override's run ({@link OVERRIDE_RUN_RELEASE}). The insert notifies {@link WORKFLOW_EVENTS_CHANNEL} at commit. Nothing
 * is written when `source` returns no row. `moved` names an action move riding on the same
 * statement, so that the event shows that action's new status.
 */
export function workflowEventCtes(source: string, previousState: WorkflowState | null, moved?: RidingActionMove) {
  return {
    // Kysely writes a raw CTE body as is: the parentheses are ours.
    event: sql<{ seq: number }>`(insert into workflow_events (workflow_id, seq, tenant, state, payload)
      select w.id, w.event_seq, w.tenant, w.state, ${eventPayloadSql(previousState, moved)} from ${sql.table(source)} w
      returning workflow_id, seq, tenant, payload)`,
    deliveries: sql<Record<string, never>>`(insert into webhook_deliveries (endpoint_id, tenant, workflow_id, event_seq, body)
      select e.id, e.tenant, ev.workflow_id, ev.seq, ev.payload::text
      from workflow_event ev join ${sql.table(source)} w on w.id = ev.workflow_id
      join webhook_endpoints e on e.tenant = ev.tenant and e.disabled_at is null
      where w.release_id <> ${OVERRIDE_RUN_RELEASE})`,
  };
}

/**
 * Writes the workflow's next event in `trx` (docs/decisions/0250-pushed-workflow-events.md): bumps
 * `workflows.event_seq` of the run and stores the event with its webhook deliveries
 * ({@link workflowEventCtes}), in one statement. Called by intake (its first event, seq 1, with
 * `previousState` null); the transition writer bumps the seq in its own state update. Returns the
 * event's seq.
 * @throws Error when the workflow does not exist (the caller's transaction rolls back).
 */
export async function recordWorkflowEvent(trx: Trx, workflowId: string, previousState: WorkflowState | null): Promise<number> {
  const ctes = workflowEventCtes('bumped', previousState);
  const written = await trx
    .with('bumped', (db) =>
      db
        .updateTable('workflows')
        .set({ event_seq: sql`event_seq + 1` })
        .where('id', '=', workflowId)
        .returning([...EVENT_SOURCE_COLUMNS]),
    )
    .with('workflow_event', () => ctes.event)
    .with('event_deliveries', () => ctes.deliveries)
    .selectFrom('workflow_event')
    .select('seq')
    .executeTakeFirstOrThrow();
  return written.seq;
}

/** A stored event: its seq and the JSON text of the `WorkflowEvent`. */
export interface StoredWorkflowEvent {
  seq: number;
  state: WorkflowState;
  /** The event's JSON, exactly as stored (what SSE sends as `data:`). */
  json: string;
}

/** The workflow's events after `afterSeq`, in seq order (at most `limit`, default 500). */
export async function readWorkflowEvents(db: Db, workflowId: string, afterSeq: number, limit = 500): Promise<StoredWorkflowEvent[]> {
  const rows = await db
    .selectFrom('workflow_events')
    .select(['seq', 'state', sql<string>`payload::text`.as('json')])
    .where('workflow_id', '=', workflowId)
    .where('seq', '>', afterSeq)
    .orderBy('seq')
    .limit(limit)
    .execute();
  return rows;
}
