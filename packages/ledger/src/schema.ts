import type { ColumnType, Generated, JSONColumnType } from 'kysely';
import type { ActionStatusSchema, ApprovalStatusSchema, WorkflowStateSchema } from '@gatehouse/contracts';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Json<T extends object | null = Record<string, unknown> | unknown[]> = JSONColumnType<T, string, string>;

/** Workflow states (docs/product/states.md#workflow): the public contract's list. */
export type WorkflowState = (typeof WorkflowStateSchema)['options'][number];

/** Workflow states from which nothing more happens without a person (docs/product/states.md#terminal-states). */
export const TERMINAL_STATES: readonly WorkflowState[] = ['completed', 'stopped', 'needs_reconciliation'];

/** True when `state` is one of {@link TERMINAL_STATES}. */
export const isTerminal = (state: string): boolean => (TERMINAL_STATES as readonly string[]).includes(state);

/** Action states (docs/product/states.md#action): the public contract's list. */
export type ActionStatus = (typeof ActionStatusSchema)['options'][number];

/** Approval states: the public contract's list. */
export type ApprovalStatus = (typeof ApprovalStatusSchema)['options'][number];

/** Operation (idempotency ledger row) states. */
export type OperationStatus = 'pending' | 'running' | 'succeeded' | 'failed' | 'failed_unknown';

export interface WorkflowsTable {
  id: string;
  tenant: string;
  ticket_id: string;
  user_id: string;
  pack: 'support' | 'change';
  mode: 'investigate' | 'act';
  text_sha256: string;
  state: WorkflowState;
  stop_reason: string | null;
  next_step: string | null;
  release_id: string;
  policy_revision: string;
  catalog_digest: string;
  round: Generated<number>;
  created_at: Timestamp;
  updated_at: Timestamp;
  /** Seq of the workflow's latest `workflow_events` row (0: none yet). */
  event_seq: Generated<number>;
  /**
   * True when the run completed while consequential writes were off for its release (act mode:
   * only its read tools were offered); the canary analysis leaves such runs out of its quality
   * measures (ADR 0724).
   */
  writes_withheld: Generated<boolean>;
}

export interface BudgetsTable {
  workflow_id: string;
  max_rounds: number;
  max_tool_calls: number;
  deadline_at: Timestamp;
  /** Model spend cap, micro-USD. */
  max_spend_micro_usd: number;
  rounds_used: Generated<number>;
  tool_calls_used: Generated<number>;
  tokens_used: Generated<number>;
  spend_micro_usd: Generated<number>;
  consecutive_invalid: Generated<number>;
  /** When a tool switch-off held the run (null when not paused). */
  paused_at: Timestamp | null;
  /** Waits (approvals, pauses) are credited to `deadline_at` up to this instant (0800). */
  wait_credited_until: Timestamp | null;
}

export interface ConversationItemsTable {
  id: Generated<string>;
  workflow_id: string;
  round: number;
  kind: 'user_message' | 'assistant_message' | 'function_call' | 'function_call_output';
  call_id: string | null;
  item: Json<Record<string, unknown>>;
  /**
   * On a `function_call` row: the opaque reasoning items the model returned just before that call,
   * in order, resent before it each round (ADR 0145); null otherwise. Never leaves the loop.
   */
  reasoning: ColumnType<Array<Record<string, unknown>> | null, string | null | undefined, string | null>;
  /**
   * On a `user_message` row of a follow-up: the client's `Idempotency-Key`, unique per workflow
   * (a retried follow-up is added once; docs/decisions/0510); null otherwise.
   */
  idempotency_key: ColumnType<string | null, string | null | undefined, never>;
  /**
   * On a `user_message` row of a follow-up with an `Idempotency-Key`: the `superseded` list its
   * `202` answered (`[{version, tool, voidedApprovals}]`), answered again to a retry with that key
   * (docs/decisions/0510, amended); null otherwise and on follow-ups older than the column.
   */
  follow_up_superseded: ColumnType<
    Array<{ version: number; tool: string; voidedApprovals: string[] }> | null,
    string | null | undefined,
    never
  >;
  created_at: Timestamp;
}

export interface ModelTurnsTable {
  workflow_id: string;
  round: number;
  response_id: string;
  model: string;
  input_sha256: string;
  /** SHA-256 of the instructions sent that round (the prompt revision); null on rows of older releases. */
  instructions_sha256: ColumnType<string | null, string | null | undefined, string | null>;
  input_tokens: number;
  output_tokens: number;
  function_calls: number;
  release_id: string;
  created_at: Timestamp;
}

/**
 * A model answer paid for but not recorded as a turn (ADR 0680): a follow-up arrived while the
 * model answered and the round was re-run with it (`follow_up`), or the run ended or the round was
 * recorded by another attempt meanwhile (`round_closed`). Counted by the tenant's daily model-spend cap.
 */
export interface DiscardedModelAnswersTable {
  id: Generated<string>;
  workflow_id: string;
  round: number;
  response_id: string;
  model: string;
  input_tokens: number;
  output_tokens: number;
  release_id: string;
  reason: 'follow_up' | 'round_closed';
  created_at: Generated<Date>;
}

export interface ProposalsTable {
  id: string;
  workflow_id: string;
  round: number;
  call_id: string;
  tool: string;
  arguments_sha256: string;
  status: 'received' | 'valid' | 'invalid';
  validation_error: Json | null;
  /** Workflow state when the model was offered the tools of this call (null: rows of older releases). */
  offered_in_state: string | null;
  created_at: Timestamp;
}

export interface ActionsTable {
  id: string;
  workflow_id: string;
  proposal_id: string;
  call_id: string;
  version: number;
  supersedes_version: number | null;
  tool: string;
  target: string;
  arguments: Json<Record<string, unknown>>;
  digest: string;
  decision: 'ALLOW' | 'DENY' | 'REQUIRE_APPROVAL';
  rule_id: string;
  policy_revision: string;
  status: ActionStatus;
  operation_key: string;
  release_id: string;
  facts: Json<Record<string, unknown>>;
  /** The workflow's tenant, copied by the database at insert (migration 20261201000900); never written by code. */
  tenant: Generated<string>;
  /** The workflow's user (its requester), copied like `tenant`. */
  user_id: Generated<string>;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface ApprovalsTable {
  id: string;
  workflow_id: string;
  action_id: string;
  action_version: number;
  action_digest: string;
  policy_revision: string;
  tool: string;
  tenant: string;
  region: string | null;
  amount_cents: number | null;
  requester: string;
  rule_id: string;
  status: ApprovalStatus;
  /** Role an approver must hold (`lead`, `change_owner`), from the bundle of the action's pack. */
  approver_role: Generated<string>;
  /** Whether the approver must share the requester's region. */
  same_region: Generated<boolean>;
  approver: string | null;
  reason: string | null;
  release_id: string;
  traceparent: string | null;
  created_at: Timestamp;
  expires_at: Timestamp;
  decided_at: Timestamp | null;
  used_at: Timestamp | null;
}

export interface OperationsTable {
  key: string;
  workflow_id: string;
  action_id: string;
  action_digest: string;
  tool: string;
  status: OperationStatus;
  fencing_token: ColumnType<string, string | number | undefined, string | number>;
  lease_owner: string | null;
  lease_expires_at: Timestamp | null;
  baseline: Json | null;
  dispatched_at: Timestamp | null;
  /** Revocation epoch of the delegated token the dispatch carried (set with the write-ahead mark); null before. */
  token_epoch: number | null;
  attempts: Generated<number>;
  result: Json | null;
  evidence_ref: string | null;
  error: string | null;
  release_id: string;
  created_at: Timestamp;
  updated_at: Timestamp;
  /** Set when reconciliation froze the operation (amount mismatch): nothing claims or retries it. */
  frozen_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /** The tenant of its action, filled on insert by a trigger (migration 20261206000682-RefundWindowsFromTheClaim); read by the refund windows' sums. */
  tenant: Generated<string | null>;
}

/** A stage of a switched-off tool's way back (docs/decisions/0310-staged-reenable.md); at most one open (`ended_at` null) per tool. */
export type ReenableStage = 'read_only' | 'cohort' | 'everyone';

/** One stage of a staged re-enable (migration 20261201000500-ToolReenables). */
export interface ToolReenableStagesTable {
  id: string;
  tool: string;
  stage: ReenableStage;
  cohort_tenants: Generated<string[]>;
  cohort_users: Generated<string[]>;
  started_at: Generated<Date>;
  started_by: string;
  reason: string;
  /** The evidence of the stage before, when this one started: clean executions, failures, 95 % bound. */
  evidence_n: number | null;
  evidence_failures: number | null;
  evidence_bound: number | null;
  /** The `--max-bound` the operator asked for. */
  max_bound: number | null;
  /** The two-person override that let it start with less evidence. */
  override_id: string | null;
  ended_at: Timestamp | null;
}

export interface ToolSwitchesTable {
  tool: string;
  enabled: boolean;
  changed_by: string;
  changed_at: Timestamp;
}

export interface CredentialEpochsTable {
  id: number;
  epoch: number;
  changed_by: string;
  changed_at: Timestamp;
}

/** A subject's not-before: its tokens issued before `not_before` are refused (docs/decisions/0695-user-tokens-can-be-revoked.md). */
export interface UserTokenNotBeforeTable {
  subject: string;
  not_before: Timestamp;
  revoked_by: string;
  reason: string;
  revoked_at: Generated<Timestamp>;
}

/** One revoked user token, by its `jti` (docs/decisions/0695-user-tokens-can-be-revoked.md). */
export interface UserTokenRevokedJtisTable {
  jti: string;
  subject: string;
  revoked_by: string;
  reason: string;
  revoked_at: Generated<Timestamp>;
}

export interface OutboxTable {
  id: Generated<string>;
  queue: string;
  job_name: string;
  job_id: string;
  payload: Json<Record<string, unknown>>;
  release_id: string;
  created_at: Timestamp;
  published_at: Timestamp | null;
}

export interface DecisionLogTable {
  id: Generated<string>;
  workflow_id: string;
  proposal_id: string | null;
  action_id: string | null;
  tool: string;
  decision: string;
  rule_id: string;
  policy_revision: string;
  detail: Json<Record<string, unknown>>;
  created_at: Timestamp;
}

export interface ReleasesTable {
  id: string;
  manifest: Json<Record<string, unknown>>;
  status: 'candidate' | 'active' | 'retired';
  writes_enabled: Generated<boolean>;
  created_at: Timestamp;
  activated_at: Timestamp | null;
  /**
   * When it first became the active release for everyone (null: never — a candidate, or one a
   * rollback retired before it was promoted); only such a release may be restored by a rollback (ADR 0660).
   */
  first_active_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** Candidate cohort `{tenants: string[], users: string[]}`; null for the active release. */
  cohort: ColumnType<{ tenants: string[]; users: string[] } | null, string | null, string | null>;
  /** Set by `gatehouse queues drain`: its queues are paused, in-flight work finishes. */
  draining: Generated<boolean>;
  /**
   * When the current drain began (null while not draining): whatever ends the hold credits the
   * held runs' wall-time budgets from then (ADR 0699, `creditDrainWait`).
   */
  draining_since: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** Activated with `--force` past failing boundary cases (audited); its services may boot with that bundle. */
  forced: Generated<boolean>;
}

/**
 * A two-person override of a failing release check (ADR 0210): requested by one operator,
 * approved by another, consumed once by the command that needed it, bound to the release and a
 * digest of the failing measures, expiring.
 */
export interface ReleaseOverridesTable {
  id: string;
  release_id: string;
  /** `reenable`: advancing a staged re-enable with less evidence; `release_id` then holds the tool. */
  kind: 'canary' | 'force_gate' | 'raise_limits' | 'reenable';
  /** sha256 over the kind, the release and what is overridden (failing measures, gate cases, raised limits). */
  failure_digest: string;
  reason: string;
  requested_by: string;
  approved_by: string | null;
  status: Generated<'pending' | 'approved' | 'used'>;
  expires_at: Timestamp;
  created_at: Generated<Date>;
  decided_at: Timestamp | null;
  used_at: Timestamp | null;
}

/** A queued job set aside by `gatehouse queues quarantine` (payload kept, never run). */
export interface QuarantinedJobsTable {
  id: Generated<string>;
  queue: string;
  job_id: string;
  release_id: string;
  workflow_id: string | null;
  payload: Json<Record<string, unknown>>;
  reason: string;
  quarantined_by: string;
  created_at: Timestamp;
}

export interface AuditOutboxTable {
  id: Generated<string>;
  event: Json<Record<string, unknown>>;
  created_at: Timestamp;
  /** W3C trace context of the span that wrote the event (not chained; joins the audit span to the trace). */
  traceparent: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface AuditLogTable {
  seq: string;
  outbox_id: string;
  event: Json<Record<string, unknown>>;
  prev_hash: string;
  hash: string;
  chained_at: Timestamp;
}

export interface AuditAnchorsTable {
  id: Generated<string>;
  seq: string;
  hash: string;
  signature: string;
  public_key: string;
  created_at: Timestamp;
}

/** A draft plan written by `prepare_change` (docs/product/users-and-tools.md#change-pack): local, no external state. */
export interface ChangePlansTable {
  /** `plan_` + 16 lowercase alphanumerics, derived from the operation key. */
  id: string;
  workflow_id: string;
  operation_key: string;
  tenant: string;
  change_id: string;
  window: 'next-maintenance-window' | 'manual-window';
  note: string | null;
  created_at: Timestamp;
}

/** The eight reconciliation classes (docs/product/reconciliation.md). */
export type ReconciliationClass =
  | 'matched'
  | 'agent_done_ledger_missing'
  | 'amount_mismatch'
  | 'ledger_entry_without_step'
  | 'in_flight_ledger_has_it'
  | 'in_flight_ledger_lacks_it'
  | 'refund_over_limit_without_approval'
  | 'shipment_count_mismatch';

/** Worklist item states: `frozen` holds an amount mismatch; `auto_resolved` is the automatic repair. */
export type ReconciliationItemStatus = 'open' | 'resolved' | 'frozen' | 'auto_resolved';

/** A lead-approved remediation of a worklist item. */
export type Remediation = 'ratify' | 'reverse' | 'cancel_shipment' | 'adopt' | 'replay';

/** One difference a reconciliation pass found (migration 20261130000400-Reconciliation). */
export interface ReconciliationItemsTable {
  id: string;
  /** The reconciliation pass that first found it. */
  run_id: string;
  class: ReconciliationClass;
  /** Repair owner of the class (`on-call`, `payments-lead`, `support-lead`, `change-owner`). */
  owner: string;
  status: ReconciliationItemStatus;
  /** Natural key of the difference (`op:<key>`, `refund:<refundId>`, `order:<orderId>`); one live item per class and subject. */
  subject: string;
  operation_key: string | null;
  workflow_id: string | null;
  tenant: string | null;
  tool: string | null;
  order_id: string | null;
  /** Integer cents (the ledger's amount where it has one). */
  amount_cents: ColumnType<string | null, number | string | null | undefined, number | string | null>;
  /** The system of record's id (refund id, shipment id, change operation key). */
  ledger_ref: string | null;
  detail: Json<Record<string, unknown>>;
  remediation: Remediation | null;
  approval_id: string | null;
  resolution: string | null;
  resolved_by: string | null;
  last_seen_run_id: string | null;
  created_at: Timestamp;
  last_seen_at: Timestamp;
  resolved_at: Timestamp | null;
}

export interface AuditHeartbeatTable {
  id: number;
  beat_at: Timestamp;
}

/** When the invariant monitors' last pass started, and on which audit replica (one row, id 1; ADR 0400). */
export interface MonitorPassesTable {
  id: number;
  started_at: Timestamp;
  replica: string | null;
}

/**
 * Whether consequential steps are held for a lost audit tail (one row, id 1; ADR 0795): raised by
 * the audit monitor, cleared by an operator's acknowledgement. Sequence numbers as bigint text.
 */
export interface AuditLossHoldTable {
  id: number;
  /** Since when steps are held; null: not held. */
  held_since: Timestamp | null;
  /** The witnessed anchor's seq beyond the head when raised. */
  witnessed_seq: string | number | null;
  /** The chain's head when raised. */
  head_seq: string | number | null;
  /** The monitor's reason (`truncated: …`). */
  reason: string | null;
  /** The highest witnessed seq acknowledged as lost (0: none). */
  acknowledged_seq: Generated<string | number>;
  acknowledged_by: string | null;
  acknowledged_at: Timestamp | null;
}

/** The ledger's tables as Kysely sees them. */
/** One pushed update of a workflow (docs/decisions/0250-pushed-workflow-events.md). */
export interface WorkflowEventsTable {
  workflow_id: string;
  /** Monotonic per workflow from 1: the SSE `id:` and the webhook event's order. */
  seq: number;
  tenant: string;
  state: WorkflowState;
  /** The event as the public contract names it (`WorkflowEvent`, packages/contracts/src/api/events.ts). */
  payload: Json<Record<string, unknown>>;
  created_at: Timestamp;
}

/** A tenant's webhook receiver (registered by an operator; never model input). */
export interface WebhookEndpointsTable {
  id: Generated<string>;
  tenant: string;
  url: string;
  /** `whsec_<base64>` signing secret (Standard Webhooks); never returned after registration. */
  secret: string;
  created_by: string;
  created_at: Generated<Date>;
  disabled_at: Timestamp | null;
}

/** Webhook outbox: one row per (endpoint, workflow event), written with the event. */
export interface WebhookDeliveriesTable {
  /** The `webhook-id` header: the same on every attempt. */
  id: Generated<string>;
  endpoint_id: string;
  tenant: string;
  workflow_id: string;
  event_seq: number;
  /** The exact JSON body sent (and signed) on every attempt. */
  body: string;
  status: Generated<'pending' | 'delivered' | 'failed'>;
  attempts: Generated<number>;
  next_attempt_at: Generated<Date>;
  last_error: string | null;
  created_at: Generated<Date>;
  finished_at: Timestamp | null;
}

export interface DB {
  workflows: WorkflowsTable;
  budgets: BudgetsTable;
  conversation_items: ConversationItemsTable;
  model_turns: ModelTurnsTable;
  discarded_model_answers: DiscardedModelAnswersTable;
  proposals: ProposalsTable;
  actions: ActionsTable;
  approvals: ApprovalsTable;
  operations: OperationsTable;
  tool_switches: ToolSwitchesTable;
  tool_reenable_stages: ToolReenableStagesTable;
  credential_epochs: CredentialEpochsTable;
  user_token_not_before: UserTokenNotBeforeTable;
  user_token_revoked_jtis: UserTokenRevokedJtisTable;
  outbox: OutboxTable;
  decision_log: DecisionLogTable;
  releases: ReleasesTable;
  audit_outbox: AuditOutboxTable;
  audit_log: AuditLogTable;
  audit_anchors: AuditAnchorsTable;
  audit_heartbeat: AuditHeartbeatTable;
  monitor_passes: MonitorPassesTable;
  audit_loss_hold: AuditLossHoldTable;
  change_plans: ChangePlansTable;
  reconciliation_items: ReconciliationItemsTable;
  quarantined_jobs: QuarantinedJobsTable;
  release_overrides: ReleaseOverridesTable;
  workflow_events: WorkflowEventsTable;
  webhook_endpoints: WebhookEndpointsTable;
  webhook_deliveries: WebhookDeliveriesTable;
}
