import { sql, type ExpressionBuilder, type Selectable } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import type { WorkflowView } from '@gatehouse/contracts';
import type { Db, Trx } from './db.ts';
import { isTerminal, type ActionsTable, type ApprovalsTable, type DB, type WorkflowsTable, type WorkflowState } from './schema.ts';

/** Postgres channel an insert into `workflow_events` notifies (payload `<workflowId>:<seq>`, at commit; migration 20261201000300). */
export const WORKFLOW_EVENTS_CHANNEL = 'gatehouse_workflow_events';

/** An action as the workflow read (`GET /v1/workflows/:id`) shows it: the public contract's type. */
export type ActionView = WorkflowView['actions'][number];

/** An open (pending or approved, not yet used) approval as the workflow read shows it (`expiresAt` ISO 8601). */
export type ApprovalView = WorkflowView['pendingApprovals'][number];

/**
 * The two JSON arrays the actions view is built from — the run's actions by version and its open
 * approvals — as select expressions of any statement (timestamps arrive as ISO text). One owner
 * of what the view reads: {@link readActionsView} selects them alone, the transition writer in
 * the RETURNING of its UPDATE (docs/decisions/0390-guards-in-the-update.md).
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
export const EVENT_SOURCE_COLUMNS = ['id', 'tenant', 'ticket_id', 'state', 'stop_reason', 'next_step', 'event_seq'] as const;

/** The workflow row an event is built from, with its `event_seq` already bumped. */
export type EventSource = Pick<Selectable<WorkflowsTable>, (typeof EVENT_SOURCE_COLUMNS)[number]>;

/**
 * Writes the workflow's next event in `trx` (docs/decisions/0250-pushed-workflow-events.md): bumps
 * `workflows.event_seq` of the new run (intake's first event, seq 1), then
 * {@link writeWorkflowEvent}. Called by intake; the transition writer bumps the seq in its own
 * state update. Returns the event's seq.
 * @throws Error when the workflow does not exist (the caller's transaction rolls back).
 */
export async function recordWorkflowEvent(trx: Trx, workflowId: string, previousState: WorkflowState | null): Promise<number> {
  const wf = await trx
    .updateTable('workflows')
    .set({ event_seq: sql`event_seq + 1` })
    .where('id', '=', workflowId)
    .returning([...EVENT_SOURCE_COLUMNS])
    .executeTakeFirstOrThrow();
  return writeWorkflowEvent(trx, wf, previousState);
}

/**
 * Stores the event of `wf`, whose `event_seq` the caller has just bumped in `trx`
 * (`WorkflowEvent` of packages/contracts/src/api/events.ts: state, stop reason, next step, the
 * action summary — no arguments, no model text), and one pending webhook delivery per active
 * endpoint of the tenant, with the exact body every attempt will sign. The insert notifies
 * {@link WORKFLOW_EVENTS_CHANNEL} at commit. `read`: the actions view the caller's own statement
 * already returned ({@link actionsViewColumns}); otherwise it is read here. Returns the event's seq.
 */
export async function writeWorkflowEvent(
  trx: Trx,
  wf: EventSource,
  previousState: WorkflowState | null,
  read?: RawActionsView,
): Promise<number> {
  const view = read ? toActionsView(read) : await readActionsView(trx, wf.id);
  const event = {
    type: 'workflow.updated',
    workflowId: wf.id,
    ticketId: wf.ticket_id,
    seq: wf.event_seq,
    state: wf.state,
    previousState,
    terminal: isTerminal(wf.state),
    stopReason: wf.stop_reason,
    nextStep: wf.next_step,
    actions: view.actions.map((a) => ({
      actionId: a.actionId,
      tool: a.tool,
      target: a.target,
      version: a.version,
      decision: a.decision,
      ruleId: a.ruleId,
      status: a.status,
    })),
    pendingApprovals: view.pendingApprovals.map(({ actionDigest: _digest, ...p }) => p),
    at: new Date().toISOString(),
  };
  const body = JSON.stringify(event);
  // One statement: the event, and one delivery per active endpoint of the tenant (a data-modifying
  // CTE always runs, referenced or not).
  await trx
    .with('event', (db) =>
      db
        .insertInto('workflow_events')
        .values({ workflow_id: wf.id, seq: wf.event_seq, tenant: wf.tenant, state: wf.state, payload: body })
        .returning('seq'),
    )
    .insertInto('webhook_deliveries')
    .columns(['endpoint_id', 'tenant', 'workflow_id', 'event_seq', 'body'])
    .expression((eb) =>
      eb
        .selectFrom('webhook_endpoints')
        .select((s) => ['id', 'tenant', s.val(wf.id).as('workflow_id'), s.val(wf.event_seq).as('event_seq'), s.val(body).as('body')])
        .where('tenant', '=', wf.tenant)
        .where('disabled_at', 'is', null),
    )
    .execute();
  return wf.event_seq;
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
