import type { Selectable } from 'kysely';
import { decidedOutOfBand, executionsQueue, isUuid, resultsQueue, type DecisionRequest } from '@gatehouse/contracts';
import {
  actorHash,
  creditWait,
  enqueueInTransaction,
  fenceSubjectTokens,
  inTransaction,
  recordAudit,
  transitionAction,
  type ActionStatus,
  type ApprovalsTable,
  type Db,
  type OutboxRow,
  type Trx,
  type WorkflowState,
} from '@gatehouse/ledger';
import { ConflictError, Forbidden, Gone, NotFound, tokenRevokedError } from '@gatehouse/platform';
import { TokenRevokedError } from '@gatehouse/credentials';
import { toSafeOutput } from '@gatehouse/tools';
import { assertAuthority, lateRefusal, runEndedRefusal } from './authority.ts';
import { endRefusedOverride } from './release-override.ts';

/**
 * Result of a decision: the approval's new status and the jobs to publish after commit.
 * `replayed`: the same approver's same decision was already recorded, and this is its answer
 * again — nothing was written and `rows` is empty (docs/decisions/0726-a-lost-decision-answer-is-replayed.md).
 */
export interface DecisionOutcome {
  approvalId: string;
  status: 'approved' | 'denied';
  rows: OutboxRow[];
  replayed?: true;
}

/**
 * The approver of a decision: the verified token's subject and tenant, and its `iat` and `jti`
 * when it has them (seconds since the epoch; what a revocation judges by, ADR 0695).
 */
export interface Decider {
  sub: string;
  tenant: string;
  iat?: number;
  jti?: string;
}

/**
 * Decides one approval (docs/product/public-contract.md#approvals).
 * First, in the decision's transaction, the approver's token must not be revoked (401
 * `token_revoked`; {@link fenceSubjectTokens}: a revocation committed before this decision's lock
 * refuses it, and a revocation started later waits until this decision committed —
 * docs/decisions/0695-user-tokens-can-be-revoked.md). Then: existence in the caller's tenant (404; an `approvalId` that is no uuid names
 * nothing and is never sent to the database), authority (403), its run ended (410
 * `workflow_<state>`, before any 409), binding to the
 * current action version and digest (409 `stale_version`: the body names another version, or the
 * bound version was superseded — amended by a follow-up or re-evaluated; sibling actions on the
 * same target are not newer versions of it), state (410 when decided, used, void or expired), then
 * one conditional UPDATE `pending → approved|denied`, so two concurrent deciders record exactly
 * one decision. Approve enqueues the execution; deny answers the call `{executed: false,
 * reason: "rejected"}`. A retry of a decision already recorded — the same approver, decision,
 * version, digest and reason, while that decision stands ({@link recordedDecision}) — is
 * answered `replayed` after the authority check, before any refusal, and writes nothing: no
 * second decision, audit event or job (ADR 0726); that holds for the loser of two identical
 * concurrent decisions as well.
 * @throws TokenRevokedError(401) | NotFound(404) | Forbidden(403) | Gone(410) | ConflictError(409)
 */
export async function decideApproval(
  db: Db,
  caller: Decider,
  approvalId: string,
  body: DecisionRequest,
  auditHmacKey: string,
): Promise<DecisionOutcome> {
  if (!isUuid(approvalId)) throw new NotFound('not_found', 'no such approval');
  try {
    return await decideInTransaction(db, caller, approvalId, body, auditHmacKey);
  } catch (err) {
    if (err instanceof Forbidden || err instanceof ConflictError || err instanceof Gone || err instanceof TokenRevokedError)
      await auditRefusedDecision(db, caller, approvalId, auditHmacKey, err.reason);
    throw err;
  }
}

/**
 * Records a refused decision attempt on an approval of the caller's tenant (`approval.refused`,
 * outcome = the refusal's reason: `not_a_lead`, `requester_cannot_approve`, `stale_version`,
 * `digest_mismatch`, `expired`, `workflow_stopped`…) in its own transaction — the decision's was
 * rolled back — with the caller's actor hash, so who tried what is in the audit trail and the
 * audit service's `approval_digest_mismatches` monitor sees repeated mismatches. An id outside
 * the caller's tenant (404) records nothing: there is no approval of theirs to name.
 */
async function auditRefusedDecision(
  db: Db,
  caller: { sub: string; tenant: string },
  approvalId: string,
  auditHmacKey: string,
  reason: string,
): Promise<void> {
  const a = await db
    .selectFrom('approvals')
    .select(['workflow_id', 'tool', 'action_version', 'policy_revision', 'release_id'])
    .where('id', '=', approvalId)
    .where('tenant', '=', caller.tenant)
    .executeTakeFirst();
  if (!a) return;
  await inTransaction(db, (trx) =>
    recordAudit(trx, {
      type: 'approval.refused',
      service: 'approval',
      runId: a.workflow_id,
      actorHash: actorHash(auditHmacKey, caller.sub),
      tool: a.tool,
      actionVersion: a.action_version,
      approvalId,
      outcome: reason,
      revisions: { policy: a.policy_revision, release: a.release_id },
    }),
  );
}

/**
 * 409 `stale_version` when the approval's action was amended: superseded (a follow-up message,
 * or the executor's re-evaluation), or a later version names it in `supersedes_version`. Versions
 * are numbered per workflow, so a sibling action on the same order (a second refund, a suppressed
 * duplicate) is not a newer version of this one. Null when the bound version is current.
 */
async function staleVersion(
  trx: Trx,
  approval: { action_id: string; workflow_id: string; action_version: number },
): Promise<ConflictError | null> {
  const bound = await trx.selectFrom('actions').select(['status']).where('id', '=', approval.action_id).executeTakeFirstOrThrow();
  const amendedBy = await trx
    .selectFrom('actions')
    .select(['version'])
    .where('workflow_id', '=', approval.workflow_id)
    .where('supersedes_version', '=', approval.action_version)
    .orderBy('version', 'desc')
    .executeTakeFirst();
  if (bound.status !== 'superseded' && !amendedBy) return null;
  const by = amendedBy ? ` by version ${amendedBy.version}` : '';
  return new ConflictError('stale_version', `version ${approval.action_version} was superseded${by}`);
}

/**
 * 410 when the approval is not open: `expired` (whether or not the sweep has marked it yet),
 * `already_<status>` once decided, consumed or voided, `workflow_<state>` once its run ended.
 * Null while it can be decided.
 */
function closedRefusal(status: string, expiresAt: Date | string, workflowState: WorkflowState): Gone | null {
  if (status === 'expired') return new Gone('expired', 'approval expired');
  if (status !== 'pending') return new Gone(`already_${status}`, `approval is ${status}`);
  const late = lateRefusal({ expiresAt }, workflowState);
  return late ? new Gone(late.reason, late.message) : null;
}

/** The approval fields {@link recordedDecision} judges by. */
interface Decided {
  id: string;
  action_id: string;
  workflow_id: string;
  action_version: number;
  action_digest: string;
  status: string;
  approver: string | null;
  reason: string | null;
  expires_at: Date | string;
}

/**
 * The answer again to a retry of a decision already recorded
 * (docs/decisions/0726-a-lost-decision-answer-is-replayed.md): `caller` decided `approval` with
 * `body`'s decision, version, digest and reason (an absent reason matches none recorded), and that
 * decision still stands — the approval is still `approved` and unexpired, still `denied`, or
 * `used` by the execution an approve enqueued — and its action was not amended since
 * ({@link staleVersion}). The outcome is `replayed`, with no rows: nothing is written again.
 * Null otherwise, and the request is judged as a new decision (its refusal as before: another
 * approver, the other decision, an approval voided or expired since).
 */
async function recordedDecision(trx: Trx, approval: Decided, caller: Decider, body: DecisionRequest): Promise<DecisionOutcome | null> {
  const status = body.decision === 'approve' ? 'approved' : 'denied';
  if (approval.approver !== caller.sub) return null;
  if (approval.action_version !== body.actionVersion || approval.action_digest !== body.actionDigest) return null;
  if (approval.reason !== (body.reason ?? null)) return null;
  const stands =
    approval.status === 'denied'
      ? status === 'denied'
      : status === 'approved' &&
        (approval.status === 'used' || (approval.status === 'approved' && new Date(approval.expires_at).getTime() > Date.now()));
  if (!stands || (await staleVersion(trx, approval))) return null;
  return { approvalId: approval.id, status, rows: [], replayed: true };
}

/** What {@link refusalOf} judges by: the run's state, and the approval's status and expiry. */
interface Seen {
  workflowState: WorkflowState;
  status: string;
  expiresAt: Date | string;
}

/**
 * Reads {@link Seen} again, in the caller's transaction: after a lost conditional UPDATE, the
 * decision sees what the other writer committed while it waited for the action's lock.
 */
async function seenNow(trx: Trx, approval: { id: string; workflow_id: string }): Promise<Seen> {
  const wf = await trx.selectFrom('workflows').select('state').where('id', '=', approval.workflow_id).executeTakeFirstOrThrow();
  const now = await trx.selectFrom('approvals').select(['status', 'expires_at']).where('id', '=', approval.id).executeTakeFirstOrThrow();
  return { workflowState: wf.state, status: now.status, expiresAt: now.expires_at };
}

/** The approval row `id` as committed now, in the caller's transaction (after a lost conditional UPDATE). */
function approvalNow(trx: Trx, id: string): Promise<Decided> {
  return trx
    .selectFrom('approvals')
    .select(['id', 'action_id', 'workflow_id', 'action_version', 'action_digest', 'status', 'approver', 'reason', 'expires_at'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
}

/**
 * Why an approval can no longer be decided, in the public contract's order
 * (docs/product/public-contract.md#approvals): its run ended (410 `workflow_<state>`: a stop or a
 * park ends the run's unclaimed actions and voids their approvals, which is no amendment), the
 * approver saw another version (409 `stale_version`, when `saw.version` is given) or its action
 * was amended (409 `stale_version`), the approver saw another action (409 `digest_mismatch`, when
 * `saw.digest` is given), or it is closed ({@link closedRefusal}), judged on `seen`. Null while it
 * can be decided. Reads the action's versions in the caller's transaction.
 */
async function refusalOf(
  trx: Trx,
  approval: { action_id: string; workflow_id: string; action_version: number; action_digest: string },
  seen: Seen,
  saw: { version?: number; digest?: string } = {},
): Promise<ConflictError | Gone | null> {
  const ended = runEndedRefusal(seen.workflowState);
  if (ended) return new Gone(ended.reason, ended.message);
  if (saw.version !== undefined && saw.version !== approval.action_version)
    return new ConflictError('stale_version', `version ${saw.version} is not the version ${approval.action_version} this approval binds`);
  const stale = await staleVersion(trx, approval);
  if (stale) return stale;
  if (saw.digest !== undefined && saw.digest !== approval.action_digest)
    return new ConflictError('digest_mismatch', 'action digest does not match');
  return closedRefusal(seen.status, seen.expiresAt, seen.workflowState);
}

/** The decision itself, in one transaction (see {@link decideApproval}). */
async function decideInTransaction(
  db: Db,
  caller: Decider,
  approvalId: string,
  body: DecisionRequest,
  auditHmacKey: string,
): Promise<DecisionOutcome> {
  return inTransaction(db, async (trx) => {
    const { approval, wf } = await loadForDecision(trx, caller, approvalId);
    // A retry of this very decision, recorded earlier: its answer again, nothing written (ADR 0726).
    const replay = await recordedDecision(trx, approval, caller, body);
    if (replay) return replay;
    const seen = { workflowState: wf.state, status: approval.status, expiresAt: approval.expires_at };
    const refused = await refusalOf(trx, approval, seen, { version: body.actionVersion, digest: body.actionDigest });
    if (refused) throw refused;
    const recorded = await recordDecision(trx, approval, caller, body);
    if ('replayed' in recorded) return recorded.replayed;
    return followDecision(trx, approval, wf.release_id, recorded, auditHmacKey);
  });
}

/** The approval row as {@link decideInTransaction} reads it. */
type ApprovalRow = Selectable<ApprovalsTable>;

/**
 * The approval `approvalId` of the caller's tenant and its run's state and release, once the
 * caller's tokens are fenced and their authority over it is checked.
 * @throws the revocation refusal (401 `token_revoked`), NotFound (404 `not_found`, also for another
 *   tenant's approval), or the authority refusal of `assertAuthority` (403, its own reason).
 */
async function loadForDecision(
  trx: Trx,
  caller: Decider,
  approvalId: string,
): Promise<{ approval: ApprovalRow; wf: { state: WorkflowState; release_id: string } }> {
  // First (lock order: the subject's token lock, then the action and approval rows; ADR 0695).
  const revoked = await fenceSubjectTokens(trx, caller);
  if (revoked) throw tokenRevokedError(revoked);
  const approval = await trx
    .selectFrom('approvals')
    .selectAll()
    .where('id', '=', approvalId)
    .where('tenant', '=', caller.tenant)
    .executeTakeFirst();
  if (!approval) throw new NotFound('not_found', 'no such approval');
  assertAuthority(caller.sub, caller.tenant, {
    tenant: approval.tenant,
    region: approval.region,
    requester: approval.requester,
    amountCents: approval.amount_cents,
    approverRole: approval.approver_role,
    sameRegion: approval.same_region,
  });
  const wf = await trx
    .selectFrom('workflows')
    .select(['state', 'release_id'])
    .where('id', '=', approval.workflow_id)
    .executeTakeFirstOrThrow();
  return { approval, wf };
}

/** A decision written to its approval row: its status, and the action's status read under its lock. */
interface RecordedDecision {
  status: 'approved' | 'denied';
  /** The approver who decided (the caller's subject). */
  approver: string;
  lockedFrom: { lockedFrom: ActionStatus };
  /**
   * Since when the run has waited on this decision: when its action was recorded as needing
   * approval (read under the action's lock; never after the approval's opening, ADR 0750).
   */
  waitingSince: Date;
}

/**
 * Writes the decision with one conditional UPDATE (pending and unexpired), under the action's row
 * lock (lock order: actions → approvals; the status read under it is the transition's `lockedFrom`,
 * ADR 0390). When the row changed while this waited for the lock — an identical decision of the
 * same approver — that decision's answer is returned as `replayed` (ADR 0726).
 * @throws the refusal the row now earns ({@link refusalOf}), or Gone (410 `expired`).
 */
async function recordDecision(
  trx: Trx,
  approval: ApprovalRow,
  caller: Decider,
  body: DecisionRequest,
): Promise<RecordedDecision | { replayed: DecisionOutcome }> {
  // The approval's action always exists (its foreign key) and was recorded before it opened.
  const held = await trx
    .selectFrom('actions')
    .select(['status', 'created_at'])
    .where('id', '=', approval.action_id)
    .forUpdate()
    .executeTakeFirstOrThrow();
  const lockedFrom = { lockedFrom: held.status };
  // The run waits from its action's decision, not from the approval's opening: an approval service
  // that was down or behind opened it late, and that wait is no more working time (ADR 0750).
  const waitingSince = new Date(held.created_at);
  const status = body.decision === 'approve' ? 'approved' : 'denied';
  const decided = await trx
    .updateTable('approvals')
    .set({ status, approver: caller.sub, reason: body.reason ?? null, decided_at: new Date() })
    .where('id', '=', approval.id)
    .where('status', '=', 'pending')
    .where('expires_at', '>', new Date())
    .returning('id')
    .executeTakeFirst();
  if (decided) return { status, approver: caller.sub, lockedFrom, waitingSince };
  // Changed after it was read, while this decision waited for the action's lock: by an identical
  // decision of the same approver (answered as that one was, ADR 0726), or by another writer.
  const replay = await recordedDecision(trx, await approvalNow(trx, approval.id), caller, body);
  if (replay) return { replayed: replay };
  throw (await refusalOf(trx, approval, await seenNow(trx, approval))) ?? new Gone('expired', 'approval expired');
}

/**
 * What follows a recorded decision, in its transaction: the run credited the wait, the
 * `approval.decided` audit event, the action's transition, and the next job as an outbox row —
 * the execution when approved, the `{executed: false, reason: "rejected"}` function_call_output
 * when denied; none for an approval decided out of band (a remediation or a release override).
 */
async function followDecision(
  trx: Trx,
  approval: ApprovalRow,
  release: string,
  { status, approver, lockedFrom, waitingSince }: RecordedDecision,
  auditHmacKey: string,
): Promise<DecisionOutcome> {
  // Waiting for a person is not the run's working time: move its deadline by the wait — since the
  // action awaited approval (ADR 0750), the part not already credited, so two approvals waited on
  // at once count the span once.
  await creditWait(trx, approval.workflow_id, waitingSince);
  await recordAudit(trx, {
    type: 'approval.decided',
    service: 'approval',
    runId: approval.workflow_id,
    actorHash: actorHash(auditHmacKey, approver),
    tool: approval.tool,
    actionDigest: approval.action_digest,
    actionVersion: approval.action_version,
    approvalId: approval.id,
    decision: status,
    revisions: { policy: approval.policy_revision, release: approval.release_id },
  });
  await transitionAction(trx, approval.action_id, { to: status, ...lockedFrom });
  if (decidedOutOfBand(approval.rule_id)) {
    // A reconciliation remediation runs in the reconciliation job once approved, never in the
    // executor or the agent loop (docs/decisions/0050-reconciliation.md); a release override is
    // consumed by the release command that needs it (0230): no job to enqueue.
    if (status === 'denied') await endRefusedOverride(trx, approval, 'denied');
    return { approvalId: approval.id, status, rows: [] };
  }
  const row = status === 'approved' ? await enqueueExecution(trx, approval, release) : await enqueueRejection(trx, approval, release);
  return { approvalId: approval.id, status, rows: [row] };
}

/** The approved action's execution job, on the run's queues (a requeue may have moved it since the approval opened). */
function enqueueExecution(trx: Trx, approval: ApprovalRow, release: string): Promise<OutboxRow> {
  return enqueueInTransaction(trx, executionsQueue, {
    release,
    traceparent: approval.traceparent ?? undefined,
    workflowId: approval.workflow_id,
    actionId: approval.action_id,
    actionVersion: approval.action_version,
    approvalId: approval.id,
  });
}

/** The denied action's function_call_output (`{executed: false, reason: "rejected"}`) for the model, by its call_id. */
async function enqueueRejection(trx: Trx, approval: ApprovalRow, release: string): Promise<OutboxRow> {
  const action = await trx.selectFrom('actions').select(['call_id']).where('id', '=', approval.action_id).executeTakeFirstOrThrow();
  const output = toSafeOutput(approval.tool, { executed: false, reason: 'rejected' }, 'gatehouse');
  return enqueueInTransaction(trx, resultsQueue, {
    release,
    traceparent: approval.traceparent ?? undefined,
    workflowId: approval.workflow_id,
    callId: action.call_id,
    output,
  });
}
