import type { AuditEventInput } from '@gatehouse/contracts';
import { recordAudit } from './audit.ts';
import type { Trx } from './db.ts';
import type { ActionStatus, WorkflowState } from './schema.ts';

/**
 * What the caller must supply for a transition to be legal (the guard of a table row): a stop
 * reason for `stopped`, a next step the rep can read for a wait (`paused`, `needs_reconciliation`).
 */
export type TransitionGuard = 'stop_reason' | 'next_step';

/** One legal workflow transition: from, to and the guards it needs. */
export interface WorkflowTransition {
  from: WorkflowState;
  to: WorkflowState;
  guards: readonly TransitionGuard[];
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

/**
 * Every legal workflow transition (the run lifecycle of docs/product/states.md; docs/decisions/0100).
 * A live state may move to any other live state (results, turns and claims arrive in any order
 * across parallel calls), to `paused` (a switched-off tool, with its next step), to a terminal
 * state, or stay (a new round, a second claim). `paused` resumes to `executing` or ends;
 * `needs_reconciliation` only closes as `completed` once reconciled; `completed` is final and
 * `stopped` only parks for reconciliation when a step's outcome turns out unknown. Nothing returns to `received`.
 */
export const WORKFLOW_TRANSITIONS: readonly WorkflowTransition[] = [
  ...LIVE.flatMap((from) => [
    ...LIVE.filter((to) => to !== 'received').map((to) => ({ from, to, guards: [] as TransitionGuard[] })),
    { from, to: 'paused' as const, guards: ['next_step'] as TransitionGuard[] },
    { from, to: 'completed' as const, guards: [] as TransitionGuard[] },
    { from, to: 'stopped' as const, guards: ['stop_reason'] as TransitionGuard[] },
    { from, to: 'needs_reconciliation' as const, guards: ['next_step'] as TransitionGuard[] },
  ]),
  { from: 'paused', to: 'executing', guards: [] },
  { from: 'paused', to: 'investigating', guards: [] },
  { from: 'paused', to: 'stopped', guards: ['stop_reason'] },
  { from: 'paused', to: 'needs_reconciliation', guards: ['next_step'] },
  { from: 'needs_reconciliation', to: 'completed', guards: ['next_step'] },
  // A step of a stopped run whose outcome turns out unknown still needs reconciling.
  { from: 'stopped', to: 'needs_reconciliation', guards: ['next_step'] },
];

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

/** One legal action transition. */
export interface ActionTransition {
  from: ActionStatus;
  to: ActionStatus;
}

const pairs = (from: ActionStatus[], to: ActionStatus[]): ActionTransition[] => from.flatMap((f) => to.map((t) => ({ from: f, to: t })));

/**
 * Every legal action transition: decided (`normalized`) → approval or execution; an approval
 * grants or denies; a claim runs it; a run ends succeeded, failed or unknown (or goes back to
 * `approved` when read-back proved nothing happened); an unknown outcome is settled by
 * reconciliation; a success may be compensated; an unclaimed version is superseded.
 */
export const ACTION_TRANSITIONS: readonly ActionTransition[] = [
  ...pairs(['proposed'], ['normalized', 'denied', 'suppressed']),
  ...pairs(['normalized'], ['pending_approval', 'approved', 'denied', 'suppressed', 'superseded']),
  ...pairs(['pending_approval'], ['approved', 'denied', 'superseded']),
  ...pairs(['approved'], ['running', 'denied', 'superseded', 'failed']),
  // A downstream refusal of authority (401/403) denies a running action.
  ...pairs(['running'], ['running', 'succeeded', 'failed', 'failed_unknown', 'denied', 'approved', 'compensated']),
  ...pairs(['failed_unknown'], ['succeeded', 'failed', 'compensated']),
  // Reconciliation may find at the system of record an effect a failed step did have.
  ...pairs(['failed'], ['succeeded', 'compensated']),
  ...pairs(['succeeded'], ['compensated']),
];

/** Thrown when a transition is not in its table (or misses a guard); nothing was written. */
export class IllegalTransition extends Error {
  override name = 'IllegalTransition';
  readonly entity: 'workflow' | 'action';
  readonly id: string;
  readonly from: string;
  readonly to: string;
  /** Guards the caller did not satisfy (empty when the move itself is not in the table). */
  readonly missing: readonly string[];
  constructor(entity: 'workflow' | 'action', id: string, from: string, to: string, missing: readonly string[] = []) {
    super(`illegal ${entity} transition ${from} → ${to} (${id})${missing.length ? `: needs ${missing.join(', ')}` : ''}`);
    this.entity = entity;
    this.id = id;
    this.from = from;
    this.to = to;
    this.missing = missing;
  }
}

/** True when `from → to` is a row of {@link WORKFLOW_TRANSITIONS}. */
export function isLegalWorkflowTransition(from: WorkflowState, to: WorkflowState): boolean {
  return WORKFLOW_TRANSITIONS.some((t) => t.from === from && t.to === to);
}

/** True when `from → to` is a row of {@link ACTION_TRANSITIONS}. */
export function isLegalActionTransition(from: ActionStatus, to: ActionStatus): boolean {
  return ACTION_TRANSITIONS.some((t) => t.from === from && t.to === to);
}

/** What a workflow transition writes besides the state. */
export interface WorkflowTransitionInput {
  to: WorkflowState;
  /** Null clears it; undefined leaves it. Required (non-empty) for `paused` and `needs_reconciliation`. */
  nextStep?: string | null;
  /** Required for `stopped`. */
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
}

/**
 * The one writer of `workflows.state`: locks the row (lock order: workflows first), checks the
 * transition against {@link WORKFLOW_TRANSITIONS} and its guards, then writes state, next step,
 * stop reason, round and `updated_at`, plus the audit event — all in the caller's `trx`.
 * Returns the state it moved from, or null when `onlyFrom` excluded the current state or the
 * workflow does not exist.
 * @throws IllegalTransition when the move is not in the table or misses a guard (nothing written).
 */
export async function transitionWorkflow(trx: Trx, workflowId: string, input: WorkflowTransitionInput): Promise<WorkflowState | null> {
  const wf = await trx.selectFrom('workflows').select(['state']).where('id', '=', workflowId).forUpdate().executeTakeFirst();
  if (!wf || (input.onlyFrom && !input.onlyFrom.includes(wf.state))) return null;
  const row = WORKFLOW_TRANSITIONS.find((t) => t.from === wf.state && t.to === input.to);
  if (!row) throw new IllegalTransition('workflow', workflowId, wf.state, input.to);
  const missing = row.guards.filter((g) => (g === 'stop_reason' ? !input.stopReason : !input.nextStep));
  if (missing.length) throw new IllegalTransition('workflow', workflowId, wf.state, input.to, missing);
  await trx
    .updateTable('workflows')
    .set({
      state: input.to,
      updated_at: new Date(),
      ...(input.nextStep !== undefined ? { next_step: input.nextStep } : {}),
      ...(input.stopReason !== undefined ? { stop_reason: input.stopReason } : {}),
      ...(input.round !== undefined ? { round: input.round } : {}),
    })
    .where('id', '=', workflowId)
    .execute();
  if (input.audit) await recordAudit(trx, { runId: workflowId, ...input.audit });
  return wf.state;
}

/** What an action transition writes. */
export interface ActionTransitionInput {
  to: ActionStatus;
  /** Only move from these statuses; otherwise return null and change nothing. */
  onlyFrom?: readonly ActionStatus[];
}

/**
 * The one writer of `actions.status`: locks the row, checks {@link ACTION_TRANSITIONS}, writes
 * status and `updated_at` in `trx`. Repeating the current status writes nothing. Returns the
 * status it moved from, or null (absent, or excluded by `onlyFrom`).
 * @throws IllegalTransition when the move is not in the table (nothing written).
 */
export async function transitionAction(trx: Trx, actionId: string, input: ActionTransitionInput): Promise<ActionStatus | null> {
  const a = await trx.selectFrom('actions').select(['status']).where('id', '=', actionId).forUpdate().executeTakeFirst();
  if (!a || (input.onlyFrom && !input.onlyFrom.includes(a.status))) return null;
  if (a.status === input.to && a.status !== 'running') return a.status; // a repeat (redelivery, settle of a settled step): nothing to write
  if (!isLegalActionTransition(a.status, input.to)) throw new IllegalTransition('action', actionId, a.status, input.to);
  await trx.updateTable('actions').set({ status: input.to, updated_at: new Date() }).where('id', '=', actionId).execute();
  return a.status;
}
