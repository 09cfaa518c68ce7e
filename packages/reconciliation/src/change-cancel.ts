import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { sql } from 'kysely';
import { isUuid, REMEDIATION_RULE_ID, testFaults } from '@gatehouse/contracts';
import { mintDelegatedToken } from '@gatehouse/credentials';
import {
  insertOutOfBandRun,
  actorHash,
  consumeApproval as consumeBoundApproval,
  grantLease,
  inTransaction,
  leaseIsLive,
  recordOutcome,
  resetToPending,
  operationKeyHash,
  readCredentialEpoch,
  recordAudit,
  reserveOperation,
  transitionAction,
  stopRun,
  transitionWorkflow,
  DependencyUnavailable,
  DEFAULT_AUDIT_GATE,
  requireAuditHealthy,
  type ApprovalBinding,
  type Db,
  type Trx,
} from '@gatehouse/ledger';
import { catalogDigest, digestOf, toolsOfPack } from '@gatehouse/tools';
import { referenceChangeBundle } from './bundles.ts';
import { cancelChange, type CompensationResult } from './compensations.ts';
import { RemediationRefused, type RemediationDeps } from './remediation.ts';
import type { ExecuteDeps, RetryWait } from './remediation-execute.ts';

/** The compensation action of a cancel-before-start (never in the agent's catalog). */
export const CANCEL_CHANGE_TOOL = 'cancel_change';
/** Delegated scope of the cancel call at the change service. */
export const CANCEL_CHANGE_SCOPE = 'change:cancel';

/** The scheduled change a cancel names: the `schedule_change` step and its operation. */
export interface ScheduledChange {
  operationKey: string;
  workflowId: string;
  actionId: string;
  actionStatus: string;
  tenant: string;
  changeId: string | null;
}

/** A cancel request, as the operator sees it: the approval a change owner must decide. */
export interface CancelTicket {
  approvalId: string;
  workflowId: string;
  actionVersion: number;
  actionDigest: string;
  /** The cancel's idempotency key at the change service: `cancel:<operationKey>` (`.v<n>` after a refusal). */
  cancelKey: string;
  operationKey: string;
  tenant: string;
  approverRole: string;
  expiresAt: Date;
  /** True when a pending request for this change existed (nothing new was written). */
  existing: boolean;
}

/** Where a cancel stands after {@link executeChangeCancel}. */
export type CancelOutcome =
  | { state: 'not_requested'; operationKey: string }
  | { state: 'awaiting_approval'; operationKey: string; approvalId: string }
  /** Another process holds the cancel's lease, until `leaseUntil` when the claim read it; absent when a newer claim fenced this one out. */
  | { state: 'busy'; operationKey: string; leaseUntil?: Date }
  /**
   * Nothing cancelled yet: the change service did not process the call (`waitingFor` `system_of_record`:
   * no answer, 408, 429, 5xx; the same key is sent again next time) or the ledger's credential
   * epoch could not be read (`postgres`: nothing claimed or sent).
   */
  | { state: 'retry'; operationKey: string; reason: string; waitingFor: Extract<RetryWait, { on: 'system_of_record' | 'postgres' }> }
  /** The approval was denied, expired or void, or the change service refused (e.g. `409:window_started`). */
  | { state: 'refused'; operationKey: string; reason: string; nextStep: string }
  | { state: 'cancelled'; operationKey: string; approver: string; replayed: boolean };

/**
 * `GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL=1` removes the change owner's approval from the cancel
 * (a pending request runs as if approved), so a test shows the requirement matters
 * (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function approvalSkipped(): boolean {
  return testFaults().cancelWithoutApproval;
}

/**
 * The `schedule_change` step named by its operation key or its workflow id (the one whose
 * operation reached the change service).
 * @throws RemediationRefused(`not_scheduled`) when the step exists but never reached the change
 *   service (naming its pending approval, the one to deny), `unknown_change` when no such step exists.
 */
export async function findScheduledChange(db: Db | Trx, ref: string): Promise<ScheduledChange> {
  const row = await db
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .innerJoin('workflows as w', 'w.id', 'o.workflow_id')
    .select(['o.key', 'o.workflow_id', 'a.id as action_id', 'a.status', 'w.tenant', 'o.status as op_status'])
    .select(sql<string | null>`(select cp.change_id from change_plans cp where cp.id = a.arguments->>'planId')`.as('change_id'))
    .where('a.tool', '=', 'schedule_change')
    .where((eb) => (isUuid(ref) ? eb.or([eb('o.key', '=', ref), eb('o.workflow_id', '=', ref)]) : eb('o.key', '=', ref)))
    .orderBy('o.created_at', 'desc')
    .executeTakeFirst();
  if (!row) throw await unscheduledRefusal(db, ref);
  return {
    operationKey: row.key,
    workflowId: row.workflow_id,
    actionId: row.action_id,
    actionStatus: row.status,
    tenant: row.tenant,
    changeId: row.change_id,
  };
}

/**
 * The refusal for a reference no scheduled change answers: `not_scheduled` when it names a
 * `schedule_change` step that never reached the change service (no operation yet), else
 * `unknown_change`.
 */
async function unscheduledRefusal(db: Db | Trx, ref: string): Promise<RemediationRefused> {
  const step = await db
    .selectFrom('actions as a')
    .select(['a.id', 'a.status', 'a.operation_key'])
    .where('a.tool', '=', 'schedule_change')
    .where((eb) =>
      isUuid(ref) ? eb.or([eb('a.operation_key', '=', ref), eb('a.workflow_id', '=', ref)]) : eb('a.operation_key', '=', ref),
    )
    .orderBy('a.created_at', 'desc')
    .executeTakeFirst();
  if (!step) return new RemediationRefused('unknown_change', `no scheduled change has the operation key or workflow ${ref}`);
  return notScheduledRefusal(db, { actionId: step.id, actionStatus: step.status, operationKey: step.operation_key });
}

/**
 * The refusal of a `schedule_change` step that is not known to be scheduled: `outcome_unknown`
 * for one that may be ({@link outcomeUnknownRefusal}), else `not_scheduled`, with the
 * operator's next step: while the step awaits its own approval, nothing has reached the change
 * service and there is nothing to cancel — the way to stop the change is to deny that approval
 * (its id, role, version and digest are named; docs/decisions/0703).
 */
async function notScheduledRefusal(
  db: Db | Trx,
  step: { actionId: string; actionStatus: string; operationKey: string },
): Promise<RemediationRefused> {
  const unknown = outcomeUnknownRefusal(step);
  if (unknown) return unknown;
  const head = `the schedule_change step of ${step.operationKey} is ${step.actionStatus}, not scheduled`;
  const ap = await db
    .selectFrom('approvals')
    .select(['id', 'approver_role', 'tenant', 'action_version', 'action_digest', 'expires_at'])
    .where('action_id', '=', step.actionId)
    .where('status', '=', 'pending')
    .orderBy('created_at', 'desc')
    .executeTakeFirst();
  if (!ap) return new RemediationRefused('not_scheduled', head);
  return new RemediationRefused(
    'not_scheduled',
    `${head}: it awaits its own approval ${ap.id} and nothing reached the change service. Next step: to stop the change, ` +
      `a ${ap.approver_role} of ${ap.tenant} denies approval ${ap.id} before ${new Date(ap.expires_at).toISOString()} — approval inbox, or ` +
      `POST /v1/approvals/${ap.id}/decision {"decision":"deny","actionVersion":${ap.action_version},"actionDigest":"${ap.action_digest}"}`,
  );
}

/** Statuses of a `schedule_change` step that may have reached the change service without its outcome being known. */
const OUTCOME_UNKNOWN_STATUSES = ['running', 'failed_unknown'];

/**
 * The refusal of a cancel of a `schedule_change` step whose outcome is not known — `running` (its
 * claim sent it, or is sending it) or `failed_unknown` — or null for any other step
 * (docs/decisions/0759-a-cancel-of-a-schedule-of-unknown-outcome-says-so.md). Such a change may be
 * scheduled at the change service and run at its window, so it is not refused as `not_scheduled`:
 * `outcome_unknown`, naming the way to learn the outcome — `gatehouse reconcile` reads the change
 * service back and settles the step (scheduled: `succeeded`, and the cancel can be asked; absent:
 * ratified as not carried out) — and to ask again. Nothing is requested.
 */
function outcomeUnknownRefusal(step: { actionStatus: string; operationKey: string }): RemediationRefused | null {
  if (!OUTCOME_UNKNOWN_STATUSES.includes(step.actionStatus)) return null;
  const now =
    step.actionStatus === 'running'
      ? 'is being sent to the change service (claimed, outcome not recorded yet)'
      : 'has an unknown outcome (failed_unknown)';
  return new RemediationRefused(
    'outcome_unknown',
    `the schedule_change step of ${step.operationKey} ${now}: the change may be scheduled and run at its window. Nothing was requested. ` +
      `Next step: gatehouse reconcile — it reads the change service back: a schedule it holds is settled as scheduled, one it lacks is listed to ratify — then ` +
      `gatehouse change cancel ${step.operationKey} --reason <why> again while the window has not started`,
  );
}

/** The latest cancel request for an operation: its action, operation and approval. */
async function latestCancel(db: Db | Trx, operationKey: string) {
  return db
    .selectFrom('actions as a')
    .innerJoin('approvals as p', 'p.action_id', 'a.id')
    .leftJoin('operations as o', 'o.key', 'a.operation_key')
    .select(['a.id as action_id', 'a.workflow_id', 'a.operation_key', 'a.version', 'a.digest', 'a.status as action_status', 'a.release_id'])
    .select(['p.id as approval_id', 'p.status as approval_status', 'p.approver_role', 'p.expires_at', 'p.tenant'])
    .select(['o.status as op_status', 'p.approver'])
    .where('a.tool', '=', CANCEL_CHANGE_TOOL)
    .where(sql<boolean>`a.arguments->>'operationKey' = ${operationKey}`)
    .orderBy('a.created_at', 'desc')
    .executeTakeFirst();
}

/**
 * Validates a cancel's reason: 1–240 printable characters (the change service's limit).
 * @throws RemediationRefused(`invalid_reason`).
 */
export function assertCancelReason(reason: string | undefined): string {
  const r = reason?.trim() ?? '';
  if (r.length < 1 || r.length > 240 || !/^[\P{Cc}]+$/u.test(r)) {
    throw new RemediationRefused('invalid_reason', 'a cancel needs --reason: 1–240 printable characters');
  }
  return r;
}

/**
 * Records a cancel-before-start of a scheduled change as a request a change owner of the
 * change's tenant decides through the approval API (rule `RECON`, like a remediation; docs/decisions/0280):
 * its own workflow (ticket = the cancel key), one `cancel_change` action whose digest binds the
 * operation key and the reason, a pending approval the operator who asks can never decide.
 * Audited (`approval.requested`, `compensation.requested` with outcome `change_cancel`). Asking
 * again while one is pending returns it.
 * @throws RemediationRefused `unknown_change`, `not_scheduled` (the step did not succeed or was
 *   compensated already), `outcome_unknown` (the step is `running` or `failed_unknown`: it may be
 *   scheduled; the refusal names `gatehouse reconcile`, ADR 0759), `cancel_approved` (an approved
 *   cancel awaits execution), `invalid_reason`.
 */
export async function requestChangeCancel(
  deps: RemediationDeps,
  req: { ref: string; reason: string | undefined; operator: string },
): Promise<CancelTicket> {
  const reason = assertCancelReason(req.reason);
  const change = await findScheduledChange(deps.db, req.ref);
  if (change.actionStatus !== 'succeeded') throw await notScheduledRefusal(deps.db, change);
  const prior = await latestCancel(deps.db, change.operationKey);
  if (prior?.approval_status === 'pending') {
    return {
      approvalId: prior.approval_id,
      workflowId: prior.workflow_id,
      actionVersion: prior.version,
      actionDigest: prior.digest,
      cancelKey: prior.operation_key,
      operationKey: change.operationKey,
      tenant: prior.tenant,
      approverRole: prior.approver_role,
      expiresAt: new Date(prior.expires_at),
      existing: true,
    };
  }
  if (prior && (prior.approval_status === 'approved' || prior.approval_status === 'used') && prior.op_status !== 'failed') {
    throw new RemediationRefused(
      'cancel_approved',
      `a cancel of ${change.operationKey} was approved: run gatehouse change cancel again to execute it`,
    );
  }
  return inTransaction(deps.db, (trx) => insertCancelRequest(trx, deps, change, reason, req.operator));
}

/**
 * The ticket id of a cancel's run: `gatehouse/<cancelKey>`. The cancel key (`cancel:<operationKey>`)
 * is made of the intake's ticket-id characters and is predictable from the scheduled run, so a
 * requester of the tenant could hold it as a ticket id and make every cancel request of that
 * change fail on the tenant's unique ticket id; `/` is outside that alphabet
 * (docs/decisions/0757-an-out-of-band-ticket-id-is-no-intake-ticket-id.md).
 */
export function cancelTicketId(cancelKey: string): string {
  return `gatehouse/${cancelKey}`;
}

/** The rows of a cancel request (see {@link requestChangeCancel}), in the caller's transaction. */
async function insertCancelRequest(
  trx: Trx,
  deps: RemediationDeps,
  change: ScheduledChange,
  reason: string,
  operator: string,
): Promise<CancelTicket> {
  await trx.selectFrom('workflows').select('id').where('id', '=', change.workflowId).forUpdate().execute(); // one request at a time
  const attempts = await trx
    .selectFrom('actions')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('tool', '=', CANCEL_CHANGE_TOOL)
    .where(sql<boolean>`arguments->>'operationKey' = ${change.operationKey}`)
    .executeTakeFirstOrThrow();
  const attempt = Number(attempts.n) + 1;
  const cancelKey = `cancel:${change.operationKey}${attempt === 1 ? '' : `.v${attempt}`}`;
  const bundle = referenceChangeBundle(deps.changeRevision, deps.policyDir);
  const args = { operationKey: change.operationKey, changeId: change.changeId, scheduledIn: change.workflowId, reason };
  const digest = digestOf({
    tool: CANCEL_CHANGE_TOOL,
    target: change.operationKey,
    arguments: args,
    actor: operator,
    tenant: change.tenant,
    policyRevision: bundle.revision,
    version: 1,
  });
  const [workflowId, proposalId, actionId, approvalId] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
  const expiresAt = new Date(Date.now() + bundle.approval.ttlSeconds * 1000);
  const run = {
    workflowId,
    proposalId,
    key: cancelKey,
    // Not the key itself: a requester of the tenant could submit that ticket id first (ADR 0757).
    ticketId: cancelTicketId(cancelKey),
    tenant: change.tenant,
    operator,
    pack: 'change',
    tool: CANCEL_CHANGE_TOOL,
    args,
    nextStep: `A ${bundle.approval.approverRole} must approve cancelling ${change.operationKey} before its window starts.`,
    release: deps.release,
    policyRevision: bundle.revision,
    catalogDigest: catalogDigest(toolsOfPack('change')),
  } as const;
  await insertOutOfBandRun(trx, run, {
    actionId,
    approvalId,
    target: change.operationKey,
    digest,
    ruleId: REMEDIATION_RULE_ID,
    facts: { cancel: { operationKey: change.operationKey, scheduledIn: change.workflowId, rollback: 'cancel-before-start' } },
    region: null,
    amountCents: null,
    approverRole: bundle.approval.approverRole,
    sameRegion: false,
    expiresAt,
  });
  const ticket: CancelTicket = {
    approvalId,
    workflowId,
    actionVersion: 1,
    actionDigest: digest,
    cancelKey,
    operationKey: change.operationKey,
    tenant: change.tenant,
    approverRole: bundle.approval.approverRole,
    expiresAt,
    existing: false,
  };
  await auditCancelRequest(trx, deps, ticket, operator, bundle.revision);
  return ticket;
}

/** `approval.requested` and `compensation.requested` (outcome `change_cancel`) of a new cancel request. */
async function auditCancelRequest(trx: Trx, deps: RemediationDeps, t: CancelTicket, operator: string, policy: string): Promise<void> {
  const audit = {
    service: 'reconciliation',
    runId: t.workflowId,
    actorHash: actorHash(deps.hmacKey, operator),
    tool: CANCEL_CHANGE_TOOL,
    actionDigest: t.actionDigest,
    actionVersion: 1,
    approvalId: t.approvalId,
    operationKeyHash: operationKeyHash(t.cancelKey),
    ruleId: REMEDIATION_RULE_ID,
    revisions: { policy, release: deps.release },
  };
  await recordAudit(trx, { ...audit, type: 'approval.requested', decision: 'REQUIRE_APPROVAL' });
  await recordAudit(trx, { ...audit, type: 'compensation.requested', outcome: 'change_cancel' });
}

type Cancel = NonNullable<Awaited<ReturnType<typeof latestCancel>>>;
type CancelClaim =
  | { kind: 'claimed'; fence: number; approver: string; args: Record<string, unknown> }
  | { kind: 'done' }
  | { kind: 'busy'; leaseUntil: Date }
  | { kind: 'refused'; reason: string };

const owner = `${hostname()}:${process.pid}:change-cancel`;

/** The next step a refused cancel leaves on its workflow, by reason. */
export function cancelNextStep(operationKey: string, reason: string): string {
  if (reason.includes('window_started'))
    return `The window of ${operationKey} started before the cancel ran: cancel-before-start no longer applies and the change runs. Ask its change owner to roll it back under the change's own plan (docs/runbooks/reenable.md#cancel-a-scheduled-change).`;
  if (reason.includes('already_cancelled')) return `${operationKey} was already cancelled under another key; nothing more to do.`;
  return `The cancel of ${operationKey} did not run (${reason}); request it again with gatehouse change cancel ${operationKey} --reason <why>.`;
}

/**
 * Consumes the change owner's approval through the operation protocol's one conditional UPDATE,
 * bound to the action (id, tool, digest, version; unexpired). With the control removed by the
 * test switch a pending approval is taken as approved by nobody. Returns false when nothing may run.
 */
async function consumeApproval(trx: Trx, c: Cancel, action: ApprovalBinding['action']): Promise<boolean> {
  if (c.approval_status === 'used') return true;
  if (c.approval_status === 'pending' && approvalSkipped()) {
    await trx.updateTable('approvals').set({ status: 'approved', decided_at: new Date() }).where('id', '=', c.approval_id).execute();
    await transitionAction(trx, c.action_id, { to: 'approved' });
  } else if (c.approval_status !== 'approved') return false;
  return consumeBoundApproval(trx, c.approval_id, { action, policyRevision: false });
}

/**
 * The fenced claim of a cancel, one transaction (lock order workflows → actions → operations →
 * approvals): reserves the operation under the cancel key, consumes the approval, grants the
 * lease with the write-ahead mark (`dispatched_at`). Audited (`approval.consumed`, `operation.claimed`).
 */
async function claimCancel(trx: Trx, c: Cancel, deps: ExecuteDeps): Promise<CancelClaim> {
  await trx.selectFrom('workflows').select('id').where('id', '=', c.workflow_id).forUpdate().execute();
  const action = await trx.selectFrom('actions').selectAll().where('id', '=', c.action_id).forUpdate().executeTakeFirstOrThrow();
  const op = await reserveOperation(trx, action);
  if (op.status === 'succeeded') return { kind: 'done' };
  if (op.status === 'failed') return { kind: 'refused', reason: op.error ?? 'failed' };
  if (leaseIsLive(op)) return { kind: 'busy', leaseUntil: new Date(op.lease_expires_at!) };
  const fresh = await trx.selectFrom('approvals').select(['status', 'approver']).where('id', '=', c.approval_id).executeTakeFirstOrThrow();
  if (!(await consumeApproval(trx, { ...c, approval_status: fresh.status }, action)))
    return { kind: 'refused', reason: `approval_${fresh.status}` };
  const approver = (await trx.selectFrom('approvals').select('approver').where('id', '=', c.approval_id).executeTakeFirstOrThrow())
    .approver;
  const audit = {
    service: 'reconciliation',
    runId: c.workflow_id,
    actorHash: actorHash(deps.hmacKey, approver ?? 'nobody'),
    tool: CANCEL_CHANGE_TOOL,
    actionDigest: c.digest,
    actionVersion: c.version,
    approvalId: c.approval_id,
    operationKeyHash: operationKeyHash(c.operation_key),
    revisions: { policy: action.policy_revision, release: action.release_id },
  };
  if (fresh.status !== 'used') await recordAudit(trx, { ...audit, type: 'approval.consumed' });
  const granted = await grantLease(trx, op, {
    owner,
    leaseMs: deps.leaseMs ?? 30_000,
    dispatchNow: true,
    workflow: { nextStep: null },
  });
  await recordAudit(trx, { ...audit, type: 'operation.claimed', attempts: op.attempts + 1 });
  return { kind: 'claimed', fence: granted.fencingToken, approver: approver ?? 'nobody', args: action.arguments };
}

/** Sends the cancel: a delegated token of the approving change owner bound to this key, fence and operation. */
async function sendCancel(deps: ExecuteDeps, c: Cancel, claim: Extract<CancelClaim, { kind: 'claimed' }>, epoch: number) {
  const operationKey = String(claim.args.operationKey);
  const token = await mintDelegatedToken(
    {
      sub: claim.approver,
      act: { sub: deps.actorId ?? 'gatehouse-reconciliation' },
      aud: 'changes',
      scope: CANCEL_CHANGE_SCOPE,
      tenant: c.tenant,
      ceiling: 0,
      epoch,
      op: c.operation_key,
      fence: claim.fence,
      target: { operationKey },
    },
    deps.signingKey,
  );
  return cancelChange(
    { stagingUrl: deps.stagingUrl, key: c.operation_key, fence: claim.fence, token },
    operationKey,
    String(claim.args.reason),
  );
}

/**
 * Completes the cancel's own run once the change service confirmed the cancel, audited
 * `run.completed` like every run that completes (service `reconciliation`, outcome `reconciled`,
 * the approving change owner's id hashed as the actor: the conventions of a parked run
 * reconciliation settles, docs/decisions/0755-out-of-band-runs-audit-their-completion.md).
 */
async function completeCancelRun(trx: Trx, c: Cancel, nextStep: string, approverHash: string): Promise<void> {
  await transitionWorkflow(trx, c.workflow_id, {
    to: 'completed',
    nextStep,
    audit: {
      type: 'run.completed',
      service: 'reconciliation',
      actorHash: approverHash,
      outcome: 'reconciled',
      revisions: { release: c.release_id },
    },
  });
}

/**
 * Records the change service's answer under the fencing token, one transaction: `succeeded` →
 * the cancel's action succeeded, its workflow completed, the original `schedule_change` step
 * `compensated`; a refusal → failed, the workflow stopped with a next step for on-call (a
 * started window: roll back under the change's own plan); no answer → back to `approved`, the
 * same key is sent again next time. Audited (`operation.succeeded|failed`, and `run.completed` when
 * the cancel's run completes).
 */
async function recordCancel(
  deps: ExecuteDeps,
  c: Cancel,
  change: ScheduledChange,
  claim: Extract<CancelClaim, { kind: 'claimed' }>,
  result: CompensationResult,
): Promise<CancelOutcome> {
  return inTransaction(deps.db, async (trx): Promise<CancelOutcome> => {
    await trx.selectFrom('workflows').select('id').where('id', '=', c.workflow_id).forUpdate().execute();
    const fenced = { actionId: c.action_id, key: c.operation_key, fencingToken: claim.fence };
    if (result.status === 'retry') {
      // No answer: proven nothing yet, so the same key is sent again next time.
      if (!(await resetToPending(trx, { ...fenced, reason: result.reason }))) return { state: 'busy', operationKey: change.operationKey };
      return { state: 'retry', operationKey: change.operationKey, reason: result.reason, waitingFor: { on: 'system_of_record' } };
    }
    const recorded = await recordOutcome(trx, {
      ...fenced,
      status: result.status,
      result: result.status === 'succeeded' ? { evidenceRef: result.evidenceRef } : null,
      evidenceRef: result.status === 'succeeded' ? result.evidenceRef : null,
      error: result.status === 'succeeded' ? null : result.reason,
    });
    if (!recorded) return { state: 'busy', operationKey: change.operationKey };
    const done = result.status === 'succeeded';
    const nextStep = done
      ? `Cancelled ${change.operationKey} before its window (approved by ${claim.approver}).`
      : cancelNextStep(change.operationKey, result.reason);
    if (done) await completeCancelRun(trx, c, nextStep, actorHash(deps.hmacKey, claim.approver));
    else await stopRun(trx, { id: c.workflow_id }, 'denied', nextStep, 'reconciliation');
    if (done) await transitionAction(trx, change.actionId, { to: 'compensated' });
    await recordAudit(trx, {
      type: done ? 'operation.succeeded' : 'operation.failed',
      service: 'reconciliation',
      runId: c.workflow_id,
      actorHash: actorHash(deps.hmacKey, claim.approver),
      tool: CANCEL_CHANGE_TOOL,
      actionDigest: c.digest,
      actionVersion: c.version,
      approvalId: c.approval_id,
      operationKeyHash: operationKeyHash(c.operation_key),
      outcome: done ? 'cancelled' : result.reason.slice(0, 120),
    });
    return done
      ? { state: 'cancelled', operationKey: change.operationKey, approver: claim.approver, replayed: false }
      : { state: 'refused', operationKey: change.operationKey, reason: result.reason, nextStep };
  });
}

/** Stops a cancel's run that will not send (`denied`, with `nextStep`), while it is still live. */
async function stopCancelRun(trx: Trx, workflowId: string, nextStep: string): Promise<void> {
  await stopRun(trx, { id: workflowId }, 'denied', nextStep, 'reconciliation', { onlyFrom: ['awaiting_approval', 'executing'] });
}

/**
 * Executes the cancel of a scheduled change once a change owner approved it, exactly once
 * (docs/decisions/0280): nothing runs while the approval is pending (`awaiting_approval`, zero
 * calls to the change service); a denied, expired or void approval stops the cancel's workflow;
 * an approved one is consumed with the fenced claim of the cancel key and sent with a delegated
 * token whose subject is the approving change owner. Safe to call repeatedly and concurrently:
 * the operation row and the change service's idempotency key make a duplicate a no-op.
 * @throws RemediationRefused(`unknown_change`) when the reference names no scheduled change.
 * @throws AuditUnavailable when audit storage is unhealthy (`deps.auditGate`): nothing claimed or sent.
 */
export async function executeChangeCancel(deps: ExecuteDeps, ref: string): Promise<CancelOutcome> {
  const change = await findScheduledChange(deps.db, ref);
  const c = await latestCancel(deps.db, change.operationKey);
  if (!c) return { state: 'not_requested', operationKey: change.operationKey };
  if (c.op_status === 'succeeded')
    return { state: 'cancelled', operationKey: change.operationKey, approver: c.approver ?? '', replayed: true };
  if (c.approval_status === 'pending' && !approvalSkipped())
    return { state: 'awaiting_approval', operationKey: change.operationKey, approvalId: c.approval_id };
  if (['denied', 'expired', 'void'].includes(c.approval_status) || c.op_status === 'failed') {
    const reason = c.op_status === 'failed' ? 'refused_downstream' : `approval_${c.approval_status}`;
    const nextStep = cancelNextStep(change.operationKey, reason);
    await inTransaction(deps.db, (trx) => stopCancelRun(trx, c.workflow_id, nextStep));
    return { state: 'refused', operationKey: change.operationKey, reason, nextStep };
  }
  // No effect without audit: the approval is left unused (docs/product/invariants.md#evidence).
  await requireAuditHealthy(deps.db, deps.auditGate ?? DEFAULT_AUDIT_GATE);
  let epoch: number;
  try {
    epoch = await readCredentialEpoch(deps.db);
  } catch (err) {
    if (err instanceof DependencyUnavailable)
      return { state: 'retry', operationKey: change.operationKey, reason: 'epoch_unavailable', waitingFor: { on: 'postgres' } };
    throw err;
  }
  const claim = await inTransaction(deps.db, (trx) => claimCancel(trx, c, deps));
  if (claim.kind === 'busy') return { state: 'busy', operationKey: change.operationKey, leaseUntil: claim.leaseUntil };
  if (claim.kind === 'done') return { state: 'cancelled', operationKey: change.operationKey, approver: c.approver ?? '', replayed: true };
  if (claim.kind === 'refused') {
    const nextStep = cancelNextStep(change.operationKey, claim.reason);
    await inTransaction(deps.db, (trx) => stopCancelRun(trx, c.workflow_id, nextStep));
    return { state: 'refused', operationKey: change.operationKey, reason: claim.reason, nextStep };
  }
  const result = await sendCancel(deps, c, claim, epoch);
  return recordCancel(deps, c, change, claim, result);
}
