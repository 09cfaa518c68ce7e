import { ConflictError, type AuditEventInput, testFaults } from '@gatehouse/contracts';
import { sql, type QueryCreator } from 'kysely';
import { auditEventWhen } from './audit.ts';
import type { Trx } from './db.ts';
import type { ActionStatus, DB, WorkflowState } from './schema.ts';
import { EVENT_SOURCE_COLUMNS, workflowEventCtes, type RidingActionMove } from './workflow-events.ts';
import { actionGuardSql, workflowGuardHolds, workflowGuardSql, type ActionGuard, type WorkflowGuard } from './transition-guards.ts';

/**
 * What a target state requires the caller to write with it: a next step the rep can read for
 * `stopped`, `paused` and `needs_reconciliation`, a stop reason and the `run.stopped` audit event
 * for `stopped` (`stopRun` writes both, so no stop leaves the audit trail silent). Not a guard:
 * the shape of the write, checked for every transition into that state.
 */
export type StateRequirement = 'stop_reason' | 'next_step' | 'run_stopped_event';

/** One legal workflow transition: from, to, and the one guard that must hold (docs/product/states.md#transition-table). */
export interface WorkflowTransition {
  from: WorkflowState;
  to: WorkflowState;
  guard: WorkflowGuard;
  /** Who takes this transition and why (documentation; the generated table in docs/product/states.md). */
  why: string;
}

/** Kinds of job a live run waits for (one contract queue each, or a person). */
export type AwaitedJob = 'turn' | 'proposal' | 'approval_request' | 'execution' | 'result' | 'human';

/** The progress rule of a non-terminal state: the jobs that may drive it and how long it may sit. */
export interface StateLiveness {
  /** Jobs of which at least one must exist (or its effect be recorded) for the run to progress. */
  awaits: readonly AwaitedJob[];
  /** No progress for longer than this (ms since `workflows.updated_at`) lists the run as stuck, unless its wait is legitimate. */
  boundMs: number;
}

const LIVE: readonly WorkflowState[] = ['received', 'investigating', 'awaiting_approval', 'executing'];

/** Every state that is not terminal: the live states and `paused`. */
export const LIVE_STATES: readonly WorkflowState[] = [...LIVE, 'paused'];

const w = (from: WorkflowState, to: WorkflowState, guard: WorkflowGuard, why: string): WorkflowTransition => ({ from, to, guard, why });
/** The same move from each of `froms`. */
const fromEach = (froms: WorkflowState[], to: WorkflowState, guard: WorkflowGuard, why: string): WorkflowTransition[] =>
  froms.map((from) => w(from, to, guard, why));

const TURN = 'agent loop: a model turn with calls, the last result answered, or a follow-up message';
const DECIDED = 'policy gateway: an action allowed; executor: the fenced claim of an approved action';
const AWAITS =
  'policy gateway: REQUIRE_APPROVAL; agent loop: a change plan prepared and not yet scheduled, or an action answered while another waits for its approval';
const FINAL = "agent loop: the model's final message; reconciliation: a remediation executed";
const STOP = 'any service: a stop reason (budgets, denial, expiry, outage, dead letter, quarantine, watchdog)';
const PAUSE =
  "executor: the step's tool is switched off, or a consequential step meets the audit-loss hold (ADR 0795), at the moment of execution";
const PARK = 'agent loop: a result whose operation ended failed_unknown';

/**
 * The next step of a run waiting for a person to approve one action: who must approve (a change
 * owner for the change pack, a lead otherwise), the tool, its target and the action version, e.g.
 * "Waiting for a lead to approve reship_order on O-1007 (version 2)."
 */
export function approvalAwaitedStep(pack: string, action: { tool: string; target: string; version: number }): string {
  return `Waiting for ${pack === 'change' ? 'a change owner' : 'a lead'} to approve ${action.tool} on ${action.target} (version ${action.version}).`;
}

/**
 * Every legal workflow transition (the run lifecycle of docs/product/states.md#transition-table;
 * docs/decisions/0100, 0150), each with exactly one guard. Only the moves the product makes:
 * nothing returns to `received`, nothing leaves `completed`, a stopped run only parks for
 * reconciliation, `needs_reconciliation` closes only as `completed`, a pause ends by a follow-up
 * or when its held tools are on. Any other move throws {@link IllegalTransition}.
 */
export const WORKFLOW_TRANSITIONS: readonly WorkflowTransition[] = [
  ...fromEach(['received', 'investigating', 'awaiting_approval', 'executing', 'paused'], 'investigating', 'all_calls_answered', TURN),
  ...fromEach(['investigating', 'awaiting_approval', 'executing'], 'awaiting_approval', 'approval_awaited', AWAITS),
  ...fromEach(['investigating', 'awaiting_approval', 'executing'], 'executing', 'action_to_execute', DECIDED),
  w('paused', 'executing', 'held_tools_on', 'ops: a switched-off tool is switched on and no held step waits on another'),
  ...fromEach(LIVE as WorkflowState[], 'completed', 'nothing_outstanding', FINAL),
  w('needs_reconciliation', 'completed', 'reconciled', 'reconciliation: every unknown outcome settled'),
  ...fromEach([...LIVE_STATES], 'stopped', 'stop_reason_known', STOP),
  ...fromEach(['investigating', 'awaiting_approval', 'executing'], 'paused', 'tool_switched_off', PAUSE),
  ...fromEach(['investigating', 'awaiting_approval', 'executing', 'paused', 'stopped'], 'needs_reconciliation', 'outcome_unknown', PARK),
];

/** What each target state requires written with it (the row's shape, for every transition into it). */
export const STATE_REQUIRES: Readonly<Partial<Record<WorkflowState, readonly StateRequirement[]>>> = {
  stopped: ['stop_reason', 'next_step', 'run_stopped_event'],
  paused: ['next_step'],
  needs_reconciliation: ['next_step'],
};

/**
 * The job each non-terminal state needs for the run to progress, and its no-progress bound.
 * `human` is a legitimate wait (a pending approval until it expires, a pause until on-call
 * switches the tool on); the watchdog re-drives only missing queue jobs (docs/decisions/0100).
 */
export const STATE_LIVENESS: Readonly<Record<Exclude<WorkflowState, 'completed' | 'stopped' | 'needs_reconciliation'>, StateLiveness>> = {
  received: { awaits: ['turn'], boundMs: 60_000 },
  investigating: { awaits: ['turn', 'proposal', 'execution', 'result'], boundMs: 120_000 },
  awaiting_approval: { awaits: ['approval_request', 'human', 'execution', 'result', 'turn'], boundMs: 120_000 },
  executing: { awaits: ['execution', 'result', 'turn'], boundMs: 120_000 },
  paused: { awaits: ['human'], boundMs: Number.POSITIVE_INFINITY },
};

/** One legal action transition, with its one guard. */
export interface ActionTransition {
  from: ActionStatus;
  to: ActionStatus;
  guard: ActionGuard;
  why: string;
}

const act = (from: ActionStatus, to: ActionStatus, guard: ActionGuard, why: string): ActionTransition => ({ from, to, guard, why });

/**
 * Statuses an action row is created in (an insert, not a transition): the policy gateway parses
 * and normalizes a call in memory (`proposed`, `normalized` are never stored) and records the
 * decided version — `approved` (ALLOW), `pending_approval`, `denied` or `suppressed` (a duplicate).
 */
export const ACTION_INITIAL_STATUSES: readonly ActionStatus[] = ['approved', 'pending_approval', 'denied', 'suppressed'];

/**
 * Every legal action transition (docs/product/states.md#transition-table), each with one guard:
 * an approval grants or refuses; an unclaimed version may be superseded; a fenced claim runs it
 * (again after its lease expired); the operation's recorded outcome ends it (a downstream
 * refusal of authority, 401/403, denies it; read-back proving nothing happened puts it back to
 * `approved`); reconciliation settles an unknown or in-flight outcome, or a failed step whose
 * refund the ledger has and a lead adopted (docs/decisions/0050); a reversal compensates.
 */
export const ACTION_TRANSITIONS: readonly ActionTransition[] = [
  act('pending_approval', 'approved', 'approval_granted', 'approval: a person approved'),
  act('pending_approval', 'denied', 'approval_refused', 'approval: a person denied, or the approval expired'),
  act(
    'pending_approval',
    'superseded',
    'unclaimed',
    'a follow-up message, a reconciliation remediation replaced, or its run stopped or parked',
  ),
  act(
    'approved',
    'superseded',
    'unclaimed',
    'a follow-up message, re-evaluation at execution changed the decision, its job named an unusable approval, or its run stopped or parked',
  ),
  act('approved', 'running', 'lease_granted', 'executor / reconciliation: the fenced claim'),
  act('approved', 'failed', 'outcome_recorded', 'executor: the operation key serves another digest (idempotency conflict)'),
  act('running', 'running', 'lease_granted', 'executor: a new claim after the lease expired'),
  act('running', 'approved', 'operation_reset', 'executor / reconciliation: read-back proved nothing happened; repeated'),
  act('running', 'succeeded', 'outcome_recorded', 'executor: the adapter result; reconciliation: an in-flight step settled'),
  act('running', 'failed', 'outcome_recorded', 'executor: the adapter result; reconciliation: an in-flight step settled'),
  act('running', 'failed_unknown', 'outcome_recorded', 'executor: the outcome is unknown'),
  act('running', 'denied', 'outcome_recorded', 'executor: the downstream refused on its own authority (401/403)'),
  act('failed_unknown', 'succeeded', 'outcome_recorded', 'reconciliation: the system of record has the effect'),
  act('failed_unknown', 'failed', 'outcome_recorded', 'reconciliation: a lead ratified that it did not happen'),
  act('failed', 'succeeded', 'outcome_recorded', "reconciliation: a lead adopted the ledger's refund under a failed step's key"),
  act(
    'succeeded',
    'compensated',
    'remediated',
    'reconciliation: a lead-approved reversal, or a change-owner-approved cancel-before-start, executed',
  ),
  act('failed', 'compensated', 'remediated', 'reconciliation: a lead-approved reversal of an effect a failed step had'),
];

/** Thrown when a transition is not in its table, or its guard does not hold; nothing was written. */
export class IllegalTransition extends ConflictError {
  readonly entity: 'workflow' | 'action';
  readonly id: string;
  readonly from: string;
  readonly to: string;
  /** The guard that did not hold, or the fields the target state requires (empty when the move is not in the table). */
  readonly missing: readonly string[];
  constructor(entity: 'workflow' | 'action', id: string, from: string, to: string, missing: readonly string[] = []) {
    super(
      'illegal_transition',
      `illegal ${entity} transition ${from} → ${to} (${id})${missing.length ? `: needs ${missing.join(', ')}` : ''}`,
    );
    this.entity = entity;
    this.id = id;
    this.from = from;
    this.to = to;
    this.missing = missing;
  }

  /** What an HTTP client is told (no ids, no guard internals): `workflow is completed; cannot move to investigating`. */
  override get publicMessage(): string {
    return `${this.entity} is ${this.from}; cannot move to ${this.to}`;
  }
}

/** True when `from → to` is a row of {@link WORKFLOW_TRANSITIONS} (its guard not evaluated; always, with the table switched off in a test). */
export function isLegalWorkflowTransition(from: WorkflowState, to: WorkflowState): boolean {
  if (tableDisabled()) return true;
  return WORKFLOW_TRANSITIONS.some((t) => t.from === from && t.to === to);
}

/** True when `from → to` is a row of {@link ACTION_TRANSITIONS} (its guard not evaluated; always, with the table switched off in a test). */
export function isLegalActionTransition(from: ActionStatus, to: ActionStatus): boolean {
  if (tableDisabled()) return true;
  return ACTION_TRANSITIONS.some((t) => t.from === from && t.to === to);
}

/**
 * `GATEHOUSE_TEST_DISABLE_TRANSITION_TABLE=1` removes the control (any move is written, no
 * guard checked) so a test can show what the table refuses (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function tableDisabled(): boolean {
  return testFaults().disableTransitionTable;
}

/** What a workflow transition writes besides the state. */
export interface WorkflowTransitionInput {
  to: WorkflowState;
  /** Null clears it; undefined leaves it. Required (non-empty) for `stopped`, `paused` and `needs_reconciliation`. */
  nextStep?: string | null;
  /** Required for `stopped`: one of `STOP_REASONS`. */
  stopReason?: string;
  /** Model round to record (turns only). */
  round?: number;
  /**
   * Only move when the current state is one of these; otherwise return null and change nothing
   * (the caller's condition, e.g. "still live"). The table is checked after this filter.
   */
  onlyFrom?: readonly WorkflowState[];
  /** Audit event written in the same transaction (its `runId` defaults to the workflow). */
  audit?: Omit<AuditEventInput, 'atMs' | 'runId'> & { runId?: string | null };
  /**
   * The state the caller read under the workflow's row lock earlier in this transaction: the
   * transition then skips its own lock read (one statement instead of two). Should the state
   * differ after all, the conditional UPDATE writes nothing and the transition reads it again.
   */
  lockedFrom?: WorkflowState;
}

/** Whether `input` writes what `requirement` asks for (see {@link StateRequirement}). */
function requirementMet(requirement: StateRequirement, input: Pick<WorkflowTransitionInput, 'nextStep' | 'stopReason' | 'audit'>): boolean {
  if (requirement === 'stop_reason') return Boolean(input.stopReason);
  if (requirement === 'next_step') return Boolean(input.nextStep);
  return input.audit?.type === 'run.stopped';
}

/**
 * The table's part of a workflow transition check, without the ledger: the row of
 * {@link WORKFLOW_TRANSITIONS} for `from → input.to` and the fields its target requires
 * ({@link STATE_REQUIRES}). Returns the row, or the {@link IllegalTransition} to throw.
 */
function tableRow(
  workflowId: string,
  from: WorkflowState,
  input: Pick<WorkflowTransitionInput, 'to' | 'nextStep' | 'stopReason' | 'audit'>,
): WorkflowTransition | IllegalTransition {
  const row = WORKFLOW_TRANSITIONS.find((t) => t.from === from && t.to === input.to);
  if (!row) return new IllegalTransition('workflow', workflowId, from, input.to);
  const missing = (STATE_REQUIRES[input.to] ?? []).filter((g) => !requirementMet(g, input));
  if (missing.length) return new IllegalTransition('workflow', workflowId, from, input.to, missing);
  return row;
}

/**
 * Checks `from → input.to` against {@link WORKFLOW_TRANSITIONS}: the row, the fields its target
 * requires ({@link STATE_REQUIRES}) and its guard, read in `trx` (one statement). Writes nothing.
 * Returns null when legal, else the {@link IllegalTransition} to throw.
 */
export async function checkWorkflowTransition(
  trx: Trx,
  workflowId: string,
  from: WorkflowState,
  input: Pick<WorkflowTransitionInput, 'to' | 'nextStep' | 'stopReason' | 'audit'>,
): Promise<IllegalTransition | null> {
  if (tableDisabled()) return null;
  const row = tableRow(workflowId, from, input);
  if (row instanceof IllegalTransition) return row;
  if (!(await workflowGuardHolds(trx, row.guard, { workflowId, stopReason: input.stopReason })))
    return new IllegalTransition('workflow', workflowId, from, input.to, [row.guard]);
  return null;
}

/**
 * The one writer of `workflows.state`: locks the row (lock order: workflows first; skipped when
 * the caller names the state it holds locked, `lockedFrom`), checks the move against
 * {@link WORKFLOW_TRANSITIONS} and its required fields, then writes state, next step, stop reason,
 * round and `updated_at` with ONE conditional UPDATE whose WHERE holds the row's guard
 * ({@link workflowGuardSql}; docs/decisions/0390-guards-in-the-update.md), plus the audit event and
 * the workflow event with its webhook deliveries (docs/decisions/0250-pushed-workflow-events.md) —
 * all in the caller's `trx`. Returns the state it moved from, or null when `onlyFrom` excluded the
 * current state or the workflow does not exist.
 * @throws IllegalTransition when the move is not in the table, misses a required field or its
 * guard does not hold (nothing written).
 */
export async function transitionWorkflow(trx: Trx, workflowId: string, input: WorkflowTransitionInput): Promise<WorkflowState | null> {
  const from =
    input.lockedFrom ??
    (await trx.selectFrom('workflows').select(['state']).where('id', '=', workflowId).forUpdate().executeTakeFirst())?.state;
  // A state the caller held may be stale only by its own earlier write: read it again under the lock.
  const again = () => transitionWorkflow(trx, workflowId, { ...input, lockedFrom: undefined });
  if (!from) return null;
  if (input.onlyFrom && !input.onlyFrom.includes(from)) return input.lockedFrom ? again() : null;
  const row = tableDisabled() ? null : tableRow(workflowId, from, input);
  if (row instanceof IllegalTransition) return input.lockedFrom ? again() : Promise.reject(row);
  // The state, the guard, the event's seq, the event and its webhook deliveries in one statement:
  // the pushed update of this transition (SSE, webhooks) is written in the same transaction, so
  // never lost or early (ADR 0250), and built in SQL on the moved row (ADR 0540).
  const writes = workflowMoveCtes(trx, trx, workflowId, from, row, input, {});
  const audit = input.audit ? { runId: workflowId, ...input.audit } : null;
  // The transition's audit event rides on it too, written only when the move is (ADR 0540).
  const moved = await (audit ? (writes.with('audit_event', () => auditEventWhen(audit, 'moved')) as unknown as typeof writes) : writes)
    .selectFrom('moved')
    .select('id')
    .executeTakeFirst();
  if (!moved) {
    if (input.lockedFrom) return again();
    throw new IllegalTransition('workflow', workflowId, from, input.to, row ? [row.guard] : []);
  }
  return from;
}

/**
 * The data-modifying CTEs of a workflow move `from → input.to` appended to `qc`: `moved`, the
 * conditional UPDATE of state, next step, stop reason, round and event seq whose WHERE holds the
 * row's guard (none with the table switched off), and the event with its webhook deliveries
 * (`workflow_event`, `event_deliveries`, {@link workflowEventCtes}). `opts.when` names an earlier
 * CTE that must have returned a row for the move to be written; `opts.moved` an action move of
 * the same statement that the event shows.
 */
function workflowMoveCtes(
  trx: Trx,
  qc: QueryCreator<DB>,
  workflowId: string,
  from: WorkflowState,
  row: WorkflowTransition | null,
  input: WorkflowTransitionInput,
  opts: { when?: string; moved?: RidingActionMove },
): QueryCreator<WithMoved> {
  const event = workflowEventCtes('moved', from, opts.moved);
  return qc
    .with('moved', (db) =>
      db
        .updateTable('workflows')
        .set({
          state: input.to,
          updated_at: new Date(),
          event_seq: sql`event_seq + 1`,
          ...(input.nextStep !== undefined ? { next_step: input.nextStep } : {}),
          ...(input.stopReason !== undefined ? { stop_reason: input.stopReason } : {}),
          ...(input.round !== undefined ? { round: input.round } : {}),
        })
        .where('id', '=', workflowId)
        .where('state', '=', from)
        .where(row ? workflowGuardSql(trx, row.guard, { workflowId, stopReason: input.stopReason }) : sql<boolean>`true`)
        .where(opts.when ? sql<boolean>`exists (select 1 from ${sql.table(opts.when)})` : sql<boolean>`true`)
        .returning([...EVENT_SOURCE_COLUMNS]),
    )
    .with('workflow_event', () => event.event)
    .with('event_deliveries', () => event.deliveries) as unknown as QueryCreator<WithMoved>;
}

/** The tables of a statement carrying a workflow move: the ledger's, and the CTE `moved`. */
type WithMoved = DB & { moved: { id: string } };

/**
 * The workflow transition of {@link transitionWorkflow} as data-modifying CTEs that ride on the
 * statement of the change it follows (the operation's grant, docs/decisions/0620-the-claim-in-two-statements.md):
 * appended to `qc`, written only when the CTE `when` returned a row, the moved row returned by the
 * CTE `moved`. It rides only when the caller holds the workflow's row lock and names its state
 * (`lockedFrom`), that state passes `onlyFrom`, the move is in {@link WORKFLOW_TRANSITIONS} with
 * its required fields, and no audit event goes with it; else null. When it is null, or `moved`
 * returned no row, the caller calls {@link transitionWorkflow} without `lockedFrom`, which reads
 * the state again under the lock and moves, returns null or throws, as always.
 */
export function workflowTransitionRiding(
  trx: Trx,
  qc: QueryCreator<DB>,
  workflowId: string,
  input: WorkflowTransitionInput,
  opts: { when: string; moved?: RidingActionMove },
): QueryCreator<WithMoved> | null {
  const from = input.lockedFrom;
  if (!from || input.audit || (input.onlyFrom && !input.onlyFrom.includes(from))) return null;
  const row = tableDisabled() ? null : tableRow(workflowId, from, input);
  if (row instanceof IllegalTransition) return null;
  return workflowMoveCtes(trx, qc, workflowId, from, row, input, opts);
}

/** What an action transition writes. */
export interface ActionTransitionInput {
  to: ActionStatus;
  /** Only move from these statuses; otherwise return null and change nothing. */
  onlyFrom?: readonly ActionStatus[];
  /**
   * The status the caller read under the action's row lock earlier in this transaction: the
   * transition then skips its own lock read. Should it differ after all, the conditional UPDATE
   * writes nothing and the transition reads it again.
   */
  lockedFrom?: ActionStatus;
}

/**
 * The one writer of `actions.status`: locks the row (skipped with `lockedFrom`), checks
 * {@link ACTION_TRANSITIONS}, and writes status and `updated_at` with ONE conditional UPDATE whose
 * WHERE holds the row's guard ({@link actionGuardSql}; docs/decisions/0390-guards-in-the-update.md),
 * in `trx`. Repeating the current status writes nothing. Returns the status it moved from, or
 * null (absent, or excluded by `onlyFrom`).
 * @throws IllegalTransition when the move is not in the table or its guard does not hold (nothing written).
 */
export async function transitionAction(trx: Trx, actionId: string, input: ActionTransitionInput): Promise<ActionStatus | null> {
  const from =
    input.lockedFrom ??
    (await trx.selectFrom('actions').select(['status']).where('id', '=', actionId).forUpdate().executeTakeFirst())?.status;
  const again = () => transitionAction(trx, actionId, { ...input, lockedFrom: undefined });
  if (!from) return null;
  if (input.onlyFrom && !input.onlyFrom.includes(from)) return input.lockedFrom ? again() : null;
  const row = actionTableRow(from, input.to);
  // A repeat (redelivery, settle of a settled step) writes nothing — so a held status is read again first.
  if (row === 'repeat') return input.lockedFrom ? again() : from;
  if (row === undefined) return input.lockedFrom ? again() : Promise.reject(new IllegalTransition('action', actionId, from, input.to));
  const moved = await trx
    .updateTable('actions')
    .set({ status: input.to, updated_at: new Date() })
    .where('id', '=', actionId)
    .where('status', '=', from)
    .where(row ? actionGuardSql(row.guard, input.to) : sql<boolean>`true`)
    .returning('id')
    .executeTakeFirst();
  if (moved) return from;
  if (input.lockedFrom) return again();
  throw new IllegalTransition('action', actionId, from, input.to, row ? [row.guard] : []);
}

/**
 * The row of {@link ACTION_TRANSITIONS} for `from → to`: `repeat` when the move writes nothing
 * (the status again, except `running`, which a new lease writes), null with the table switched
 * off in a test (any move, no guard), undefined when the move is illegal.
 */
function actionTableRow(from: ActionStatus, to: ActionStatus): ActionTransition | 'repeat' | null | undefined {
  if (from === to && from !== 'running') return 'repeat';
  if (tableDisabled()) return null;
  return ACTION_TRANSITIONS.find((t) => t.from === from && t.to === to);
}

/**
 * The action transition `from → to` as an `update actions … returning id` that rides, as a
 * data-modifying CTE, on the statement of the operation change it follows: one round trip for
 * both (docs/decisions/0530-action-moves-with-its-operation.md). Its guard ({@link actionGuardSql})
 * reads the operation's new row from `operations`, the CTE of that statement returning every
 * column, since the statement's snapshot still shows the table's old row. Returns null when the
 * move cannot ride — a repeat, which writes nothing, or a move outside {@link ACTION_TRANSITIONS}.
 * The caller then calls {@link transitionAction}, as it does when the CTE moved no row (the status
 * was not `from` after all): that repeats, reads again under the lock or throws, as always.
 */
export function actionTransitionRiding(db: QueryCreator<DB>, actionId: string, from: ActionStatus, to: ActionStatus, operations: string) {
  const row = actionTableRow(from, to);
  if (row === 'repeat' || row === undefined) return null;
  return db
    .updateTable('actions')
    .set({ status: to, updated_at: new Date() })
    .where('id', '=', actionId)
    .where('status', '=', from)
    .where(row ? actionGuardSql(row.guard, to, operations) : sql<boolean>`true`)
    .returning(['id', 'status']);
}
