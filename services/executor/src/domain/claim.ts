import { ConflictError, type ExecutionJob } from '@gatehouse/contracts';
import {
  checkWorkingTime,
  isLegalWorkflowTransition,
  consumeApproval,
  grantLease,
  isFinishedOperation,
  leaseIsLive,
  lockActionAndReserve,
  type AuditEventDraft,
  type DecisionContext,
  type Trx,
  type ActionsTable,
  type ActionStatus,
  type OperationsTable,
  type OutagePolicy,
  type OutboxRow,
  type WorkflowsTable,
} from '@gatehouse/ledger';
import type { RawBuilder, Selectable } from 'kysely';
import {
  approvalAmountCents,
  decideAndRecord,
  evaluateAction,
  ridingLimitSums,
  type AuthoritativeRecord,
  type PolicyBundles,
  type RefundSums,
  type RidingRefundSums,
} from '@gatehouse/policy';
import { findTool } from '@gatehouse/tools';
import { executionAuditFields, type AuditBasis, type ExecutionAuditFields } from './execution-audit.ts';

type Action = Selectable<ActionsTable>;
type Operation = Selectable<OperationsTable>;

/** What a claim attempt found. Only `claimed` may call the adapter. */
export type ClaimOutcome =
  | {
      kind: 'claimed';
      action: Action;
      fencingToken: number;
      reclaimed: boolean;
      previouslyDispatched: boolean;
      baseline: Record<string, unknown> | null;
      /**
       * The run's working-time deadline (epoch ms; null without a budget): as the first claim's
       * check judged it (after crediting an outage the job waited through), on a reclaim as read
       * with the run's lock. An idempotent write waits for or sends no retry past it
       * (docs/decisions/0772-a-write-keeps-within-its-runs-deadline.md).
       */
      runDeadlineMs: number | null;
      /**
       * The correlation fields the claim's audit events carried, reused by the record's event: the
       * same action, and the approval the job names (the one this claim consumed, or on a reclaim
       * the one consumed before), else the approval used for the action (ADR 0146, ADR 0350).
       */
      audit: ExecutionAuditFields;
    }
  | { kind: 'replay'; action: Action; operation: Operation }
  | { kind: 'busy' }
  | { kind: 'skip'; reason: string }
  | { kind: 'approval_unusable'; action: Action; reason: string }
  | { kind: 'conflict'; action: Action }
  /** Facts changed since the decision: a new action version was recorded instead of executing. */
  | { kind: 'reevaluated'; outcome: string; rows: OutboxRow[] }
  /** The run's wall-time deadline passed before dispatch (docs/product/invariants.md#bounds). */
  | { kind: 'deadline'; action: Action }
  /** The step waited on an unavailable dependency past the outage ceiling. */
  | { kind: 'outage'; action: Action }
  /** Containment holds the step, read again at the claim (ADR 0683): nothing was written. */
  | { kind: 'held' };

/** Policy inputs for the re-evaluation at execution. */
export interface Reevaluation {
  wf: Selectable<WorkflowsTable>;
  bundles: PolicyBundles;
  /** The authoritative record (order, or change and plan) read just before the claim; null when not re-evaluated. */
  record: AuthoritativeRecord | null;
  auditHmacKey: string;
  /** Test-only switch (control-removed test). */
  disabled: boolean;
}

/** Settings of {@link claimOperation}. */
export interface ClaimOptions {
  owner: string;
  leaseMs: number;
  baseline: Record<string, unknown> | null;
  auditHmacKey: string;
  /** The basis of the claim's audit events, read with the action before the claim; absent: read in the claim's transaction. */
  auditBasis?: AuditBasis;
  userId: string;
  reevaluation: Reevaluation;
  /** Require the approval to name exactly this action (false only in control-removed tests). */
  bindDigest: boolean;
  /** Refuse the claim while another worker's lease is live (false only in control-removed tests). */
  honourLease?: boolean;
  /** Credits the outage this job waited through (`job.outage`) before the deadline check. */
  outagePolicy: OutagePolicy;
  /**
   * Where a first claim re-evaluates the policy (docs/decisions/0430-limit-locks-last-in-the-claim.md):
   * `last` (default) after the grant, so the limit locks are held only for their sums and the
   * COMMIT, throwing {@link FactsChangedAtClaim} (the caller's transaction rolls back) when the
   * decision changed; `first` before the grant, recording the new decision as a new action version.
   */
  reevaluate?: 'last' | 'first';
  /**
   * The tool's containment, read by the checks' statement after the caller took the containment
   * lock (docs/decisions/0683-switch-off-serializes-with-the-claim.md): when it holds the step, the
   * claim throws {@link ContainmentHeldAtClaim} before anything else. Absent: not checked
   * (control-removed tests).
   */
  containment?: { read: RawBuilder<unknown>; holds(value: unknown): boolean };
}

/**
 * Thrown by a claim whose re-evaluation, made last under the limit locks, found another decision
 * than the action's: the transaction must roll back (nothing of the grant survives), and the
 * claim runs again with `reevaluate: 'first'`, which records the new decision
 * (docs/decisions/0430-limit-locks-last-in-the-claim.md).
 */
export class FactsChangedAtClaim extends ConflictError {
  readonly actionId: string;
  constructor(actionId: string) {
    super(
      'facts_changed_at_claim',
      `the policy decision of action ${actionId} changed since it was recorded; the claim is rolled back, to be re-evaluated before the grant`,
    );
    this.actionId = actionId;
  }
}

/**
 * Thrown by a claim whose checks' statement found the tool contained (switched off, or its cohort
 * stage no longer admitting the run) after the containment lock: the transaction must roll back
 * (the operation's reservation made by the same statement with it), and the step is held as at the
 * containment step (docs/decisions/0683-switch-off-serializes-with-the-claim.md).
 */
export class ContainmentHeldAtClaim extends ConflictError {
  readonly actionId: string;
  constructor(actionId: string) {
    super('containment_held_at_claim', `tool containment holds action ${actionId} at its claim; nothing is claimed`);
    this.actionId = actionId;
  }
}

/**
 * The fenced claim (docs/product/design.md#correctness-rules: uniqueness, fencing, write-ahead, stable keys), in the caller's transaction:
 * reserve the operation key (insert-if-absent), refuse a key seen with another digest
 * (`idempotency_conflict`), consume the approval — only when tool, digest, version and policy
 * revision still match and it is unexpired — and grant the lease with one conditional UPDATE that
 * increments the fencing token and writes the `running` mark and baseline. The caller commits
 * this before calling the adapter (write-ahead). The checks before the grant take one statement
 * (the workflow row, the action row with its reserved operation, and with `opts.containment` the
 * tool's containment read after the caller's containment lock) and the writes go through the
 * operation protocol of the ledger (docs/decisions/0270-one-operation-protocol.md). A first
 * claim re-evaluates the policy last, after the grant, under the limit locks (ADR 0430).
 * @throws FactsChangedAtClaim when that re-evaluation finds another decision (`reevaluate: 'last'`):
 *   the caller rolls the transaction back and claims again with `reevaluate: 'first'`.
 * @throws ContainmentHeldAtClaim when `opts.containment` holds the step: the caller rolls the
 *   transaction back (the reservation with it) and holds the step.
 */
export async function claimOperation(trx: Trx, job: ExecutionJob, opts: ClaimOptions): Promise<ClaimOutcome> {
  // Lock order everywhere: workflows → actions → operations → approvals (no deadlock cycles). The
  // limit locks of a first claim's re-evaluation come last, after every row lock of the claim;
  // with `reevaluate: 'first'` they come earlier, and what the claim locks after them belongs to
  // its own action, whose rows it locked first (ADR 0430).
  // Statement 1, the checks' reads: the workflow row, locked, with its state and what a
  // re-evaluation reads about the run (release writes, the offered state), then the action,
  // locked, and its operation reserved and locked (docs/decisions/0270-one-operation-protocol.md,
  // 0620-the-claim-in-two-statements.md). Statement 2, the grant, below.
  // The containment read rides on it too, on a snapshot taken after the containment lock (ADR 0683).
  const locked = await lockActionAndReserve(
    trx,
    job.actionId,
    { version: job.actionVersion, statuses: CLAIMABLE },
    { lockRun: job.workflowId, ...(opts.containment ? { read: opts.containment.read } : {}) },
  );
  if (locked && opts.containment?.holds(locked.read)) throw new ContainmentHeldAtClaim(job.actionId);
  if (!locked || locked.action.version !== job.actionVersion) return { kind: 'skip', reason: 'unknown_action_version' };
  const { action, op, run: wf } = locked;
  if (!op) return { kind: 'skip', reason: `action_${action.status}` };
  if (op.action_digest !== action.digest) return { kind: 'conflict', action };
  // Reconciliation froze it (amount mismatch): only a lead's remediation may touch it now.
  if (op.frozen_at) return { kind: 'skip', reason: 'operation_frozen' };
  if (isFinishedOperation(op.status)) return { kind: 'replay', action, operation: op };
  // One worker at a time, whichever replica: a live lease sends the others back to the queue (retried).
  if (leaseIsLive(op) && opts.honourLease !== false) return { kind: 'busy' };
  const first = op.status === 'pending';
  const reevaluateLast = opts.reevaluate !== 'first';
  let runDeadlineMs = wf?.deadlineAtMs ?? null;
  if (first) {
    const checked = await firstClaimChecks(trx, job, action, op, wf ?? null, opts);
    if ('stop' in checked) return checked.stop;
    runDeadlineMs = checked.deadlineAtMs;
    if (!reevaluateLast) {
      const changed = await reevaluateBeforeGrant(trx, action, op, wf ?? null, opts.reevaluation);
      if (changed) return changed;
    }
  }
  const audit = await executionAuditFields(trx, action, {
    auditHmacKey: opts.auditHmacKey,
    approvalId: job.approvalId,
    basis: opts.auditBasis,
  });
  if (op.status === 'pending' && action.decision === 'REQUIRE_APPROVAL') {
    const refused = await consumeForClaim(trx, job, action, opts.bindDigest, { ...audit, type: 'approval.consumed' });
    // A changed decision still comes before an unusable approval, as when the re-evaluation came
    // first: nothing was written yet, so its new version is recorded here (ADR 0430).
    if (refused && reevaluateLast) return (await reevaluateBeforeGrant(trx, action, op, wf ?? null, opts.reevaluation)) ?? refused;
    if (refused) return refused;
  }
  // The limit locks are taken last, so they are held for their sums and the COMMIT only (ADR 0430):
  // by the grant's own statement, after the grant and the moves riding on it (ADR 0620).
  const reevaluates = first && reevaluateLast;
  const sums = reevaluates ? limitSumsRead(action, opts.reevaluation) : null;
  const granted = await grantLease(trx, op, {
    owner: opts.owner,
    leaseMs: opts.leaseMs,
    baseline: opts.baseline,
    // Both rows were locked and read by this claim's first two statements (ADR 0390).
    actionStatus: action.status,
    workflow: { nextStep: null, onlyFrom: ['investigating', 'awaiting_approval', 'executing'], ...(wf ? { lockedFrom: wf.state } : {}) },
    audit: { ...audit, type: 'operation.claimed', attempts: op.attempts + 1 },
    ...(sums ? { read: sums.expression } : {}),
  });
  const lockedSums = sums ? sums.parse(granted.read) : undefined;
  if (reevaluates && (await decisionChanged(trx, action, wf ?? null, opts.reevaluation, lockedSums)))
    throw new FactsChangedAtClaim(action.id);
  return {
    kind: 'claimed',
    action: { ...action, status: 'running' },
    fencingToken: granted.fencingToken,
    reclaimed: op.status === 'running',
    previouslyDispatched: op.dispatched_at !== null,
    baseline: (granted.baseline as Record<string, unknown> | null) ?? null,
    runDeadlineMs,
    audit,
  };
}

/** Action statuses a claim may look at (the others are skipped). */
export const CLAIMABLE: readonly ActionStatus[] = ['approved', 'running', 'succeeded', 'failed', 'failed_unknown'];

/**
 * The checks of a first claim (nothing was sent yet, so the run's state and deadline may still
 * stop it). On a stop the reservation just made is removed (no orphan pending rows). Otherwise
 * the run's deadline the check judged (epoch ms, after any outage credit; null without a budget).
 */
async function firstClaimChecks(
  trx: Trx,
  job: ExecutionJob,
  action: Action,
  op: Operation,
  run: DecisionContext | null,
  opts: ClaimOptions,
): Promise<{ stop: ClaimOutcome } | { deadlineAtMs: number | null }> {
  const state = run?.state ?? null;
  // Only a run that may move to `executing` starts an effect (terminal states and `received` may not).
  if (!state || !isLegalWorkflowTransition(state, 'executing')) {
    await unreserve(trx, op);
    return { stop: { kind: 'skip', reason: `workflow_${state}` } };
  }
  const time = await checkWorkingTime(trx, action.workflow_id, job.outage, opts.outagePolicy, run ?? undefined);
  if (time.kind !== 'ok') {
    await unreserve(trx, op);
    return { stop: { kind: time.kind === 'budget_exhausted' ? 'deadline' : 'outage', action } };
  }
  return { deadlineAtMs: time.deadlineAtMs };
}

/** Removes a reservation this claim just made and did not use. */
async function unreserve(trx: Trx, op: Operation): Promise<void> {
  await trx.deleteFrom('operations').where('key', '=', op.key).where('status', '=', 'pending').where('fencing_token', '=', '0').execute();
}

/**
 * The policy re-evaluation at execution (docs/product/design.md#flow-of-a-ticket): the action's tool and
 * arguments judged again on the authoritative record read before the claim and the ledger's sums
 * read under the limit locks (taken here, held to the end of the transaction). True when the
 * decision, its rule or its policy revision differ from the action's, or when an approval is
 * needed and more is at stake than it was granted for ({@link stakeGrew}). False without a
 * re-evaluation (no record read, or the test-only switch).
 */
async function decisionChanged(
  trx: Trx,
  action: Action,
  run: DecisionContext | null,
  r: Reevaluation,
  lockedSums?: RefundSums,
): Promise<boolean> {
  const input = reevaluationInput(action, r);
  if (!input) return false;
  const { decision: now, snapshot } = await evaluateAction(trx, {
    ...input,
    proposalId: action.proposal_id,
    ...(run ? { context: run } : {}),
    ...(lockedSums ? { lockedSums } : {}),
  });
  if (!(now.decision === action.decision && now.ruleId === action.rule_id && now.policyRevision === action.policy_revision)) return true;
  return action.decision === 'REQUIRE_APPROVAL' && stakeGrew(r.wf.pack, action, snapshot);
}

/**
 * What the re-evaluation of `action` judges: its tool and arguments on the authoritative record,
 * leaving the action itself out of the sums, at execution. Null when nothing is re-evaluated (no
 * record read, an unknown tool, or the test-only switch).
 */
function reevaluationInput(action: Action, r: Reevaluation) {
  const tool = findTool(action.tool);
  if (r.disabled || !tool || !r.record) return null;
  const parsed = { tool, args: action.arguments as Record<string, string | number | null> };
  return { wf: r.wf, parsed, record: r.record, bundles: r.bundles, excludeActionId: action.id, atExecution: true };
}

/**
 * The limit locks and sums the re-evaluation of `action` reads, as the read that rides on the
 * grant's statement (`ridingLimitSums`, docs/decisions/0620-the-claim-in-two-statements.md). Null
 * when it reads none: no re-evaluation, or a decision without refund sums.
 */
function limitSumsRead(action: Action, r: Reevaluation): RidingRefundSums | null {
  const input = reevaluationInput(action, r);
  return input ? ridingLimitSums(input) : null;
}

/**
 * Whether more is at stake now than the action's approval was granted for (a reship of an order
 * whose paid amount rose since the decision): the approver's limit was checked against the
 * amount then (docs/product/policy-rules.md#approvals), so the action needs a new approval.
 * False when either amount is unknown.
 */
function stakeGrew(pack: string, action: Action, snapshot: Record<string, unknown>): boolean {
  const args = action.arguments as Record<string, unknown>;
  const granted = approvalAmountCents(pack, args, (action.facts ?? {}) as { orderPaidCents?: number | null });
  const now = approvalAmountCents(pack, args, snapshot as { orderPaidCents?: number | null });
  return granted !== null && now !== null && now > granted;
}

/**
 * The re-evaluation made before the grant (`reevaluate: 'first'`, after a claim threw
 * {@link FactsChangedAtClaim}): when the decision changed, the reservation is removed and the new
 * decision recorded as the action's next version, with the jobs it publishes (`reevaluated`).
 */
async function reevaluateBeforeGrant(
  trx: Trx,
  action: Action,
  op: Operation,
  run: DecisionContext | null,
  r: Reevaluation,
): Promise<ClaimOutcome | null> {
  const tool = findTool(action.tool);
  if (!tool || !r.record || !(await decisionChanged(trx, action, run, r))) return null;
  await unreserve(trx, op);
  const out = await decideAndRecord(trx, {
    wf: r.wf,
    proposalId: action.proposal_id,
    round: r.wf.round,
    callId: action.call_id,
    parsed: { tool, args: action.arguments as Record<string, string | number | null>, target: action.target },
    record: r.record,
    bundles: r.bundles,
    auditHmacKey: r.auditHmacKey,
    service: 'executor',
    reevaluates: action,
  });
  return { kind: 'reevaluated', outcome: out.outcome, rows: out.rows };
}

/**
 * Consumes the approval of a REQUIRE_APPROVAL action for its first claim (operation protocol,
 * binding per docs/product/invariants.md#approval), writing `event` with the consumption. Returns null when this claim consumed it,
 * false when an earlier claim of this same operation did (it went back to pending after a proven
 * non-effect: one approval per action) and the approval is still within its maximum age
 * (`expires_at`), else the refusal with its reason — `approval_expired` for an approval past it,
 * approved or used (ADR 0707: a step held after its claim does not run on a stale approval).
 */
async function consumeForClaim(
  trx: Trx,
  job: ExecutionJob,
  action: Action,
  bindDigest: boolean,
  event: AuditEventDraft,
): Promise<ClaimOutcome | null | false> {
  if (!job.approvalId) return { kind: 'approval_unusable', action, reason: 'approval_missing' };
  // Control removed (tests only, bindDigest false): any approved approval would do. The
  // `approval.consumed` event rides on the consuming UPDATE (ADR 0620).
  if (await consumeApproval(trx, job.approvalId, bindDigest ? { action, policyRevision: true } : null, event)) return null;
  const a = await trx
    .selectFrom('approvals')
    .select(['status', 'expires_at', 'action_id'])
    .where('id', '=', job.approvalId)
    .executeTakeFirst();
  // Past its maximum age an approval runs nothing, consumed or not: a used one is this action's
  // earlier consumption only within it (docs/decisions/0707-a-held-step-does-not-outlive-its-approval.md).
  const expired = a !== undefined && new Date(a.expires_at).getTime() <= Date.now();
  if (a?.status === 'used' && a.action_id === action.id && !expired) return false;
  const reason = !a
    ? 'approval_missing'
    : a.action_id !== action.id
      ? 'approval_names_another_action'
      : (a.status === 'approved' || a.status === 'used') && expired
        ? 'approval_expired'
        : `approval_${a.status}`;
  return { kind: 'approval_unusable', action, reason };
}
