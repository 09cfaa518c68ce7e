import { queueName, resultsQueue, type ExecutionJob } from '@gatehouse/contracts';
import {
  endUnclaimedActions,
  enqueueInTransaction,
  inTransaction,
  outageOutlasted,
  recordAudit,
  recordAuditIfPublished,
  transitionAction,
  DEPENDENCY_UNAVAILABLE,
  type ActionsTable,
  type DependencyUnavailable,
  type OperationsTable,
  type Trx,
} from '@gatehouse/ledger';
import type { Selectable } from 'kysely';
import { toSafeOutput, type SafeOutput } from '@gatehouse/tools';
import type { ClaimOutcome } from '../../domain/claim.ts';
import { executionAuditFields, type AuditBasis } from '../../domain/execution-audit.ts';
import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import type { ExecutionDeps } from '../execution-deps.ts';

/** How a result moves its run besides answering the call: parked for reconciliation, or stopped. */
export type ResultEffect = {
  park?: 'needs_reconciliation';
  stop?: 'approval_expired' | 'tool_disabled' | 'budget_exhausted' | 'dependency_unavailable';
};

/**
 * Answers the call `callId` with `output` (a `results` job through the outbox, then published);
 * `within` runs first in the same transaction (what must commit with the answer, or not at all).
 */
export async function publishResult(
  deps: Pick<ExecutionDeps, 'db' | 'relay'>,
  job: ExecutionJob,
  callId: string,
  output: SafeOutput,
  extra: ResultEffect = {},
  within?: (trx: Trx) => Promise<unknown>,
): Promise<void> {
  const rows = await inTransaction(deps.db, async (trx) => {
    await within?.(trx);
    return [await enqueueInTransaction(trx, resultsQueue, { release: job.release, workflowId: job.workflowId, callId, output, ...extra })];
  });
  await deps.relay.publish(rows);
}

/**
 * Answers the call of an action that did not run: `{executed: false, reason}`, labelled as
 * Gatehouse's own output, and `extra` (e.g. the stop it causes). Returns `refused` with `label`
 * (default `reason`).
 */
export async function refuse(
  deps: Pick<ExecutionDeps, 'db' | 'relay'>,
  job: ExecutionJob,
  action: { call_id: string; tool: string },
  reason: string,
  extra: ResultEffect = {},
  label = reason,
): Promise<ExecutionOutcome> {
  await publishResult(deps, job, action.call_id, toSafeOutput(action.tool, { executed: false, reason }, 'gatehouse'), extra);
  return { kind: 'refused', reason: label };
}

/**
 * Answers the call of an action whose job named an approval it cannot use — missing, voided,
 * denied, or naming another action (a stray or malformed job; an expired one stops the run
 * instead) — `{executed: false, reason}`, and ends the action in the same transaction: it moves
 * to `superseded` and its open approvals are voided (outcome `approval_unusable`), so a refund
 * the model was told did not run neither runs later nor counts as queued money in every later
 * limit check (docs/decisions/0610-a-stopped-run-ends-its-unclaimed-actions.md). The run's row is
 * locked first (lock order, docs/decisions/0014-row-lock-order.md).
 */
async function refuseUnusableApproval(
  deps: Pick<ExecutionDeps, 'db' | 'relay'>,
  job: ExecutionJob,
  action: Selectable<ActionsTable>,
  reason: string,
): Promise<ExecutionOutcome> {
  const output = toSafeOutput(action.tool, { executed: false, reason }, 'gatehouse');
  await publishResult(deps, job, action.call_id, output, {}, async (trx) => {
    const wf = await trx
      .selectFrom('workflows')
      .select(['id', 'release_id'])
      .where('id', '=', action.workflow_id)
      .forUpdate()
      .executeTakeFirst();
    if (wf) await endUnclaimedActions(trx, wf, 'approval_unusable', 'executor', { actionId: action.id });
  });
  return { kind: 'refused', reason };
}

/**
 * A step held before its claim (audit storage unhealthy, the authoritative read failing) would
 * never reach the claim's working-time check while the dependency stays down: past the outage
 * ceiling it stops the run here (`dependency_unavailable`; nothing was claimed or consumed),
 * otherwise the outcome is `waiting` on `down` and the worker holds the job.
 */
export async function stopPastCeilingOrHold(
  deps: Pick<ExecutionDeps, 'db' | 'relay' | 'outagePolicy'>,
  job: ExecutionJob,
  action: { call_id: string; tool: string },
  down: DependencyUnavailable,
): Promise<ExecutionOutcome> {
  if (!outageOutlasted(job.outage, deps.outagePolicy)) return { kind: 'waiting', error: down };
  return refuse(deps, job, action, DEPENDENCY_UNAVAILABLE, { stop: DEPENDENCY_UNAVAILABLE });
}

/**
 * Replays a finished operation's stored outcome (operation protocol, ADR 0270; docs/decisions/0350-redelivery-without-a-claim.md):
 * the redelivery is audited `operation.replayed`, and the call's `results` job is written and
 * published again only when none was published yet (a published one was delivered, or is
 * re-driven by the watchdog if Redis lost it; one its writer died before publishing is published
 * now rather than after the relay's sweep), a `failed_unknown` one parking the run for
 * reconciliation. The usual case — the result already published — is one conditional insert of
 * the event, with no transaction; otherwise the job and the event are written in one
 * transaction. Returns `replayed` with the operation's status.
 */
export async function replayStoredOutcome(
  deps: Pick<ExecutionDeps, 'db' | 'relay' | 'auditHmacKey'>,
  job: ExecutionJob,
  action: Selectable<ActionsTable>,
  op: Pick<Selectable<OperationsTable>, 'status' | 'result' | 'evidence_ref'>,
  basis?: AuditBasis,
): Promise<ExecutionOutcome> {
  const payload = {
    release: job.release,
    workflowId: job.workflowId,
    callId: action.call_id,
    output: (op.result as SafeOutput | null) ?? toSafeOutput(action.tool, { executed: false, status: op.status }, 'gatehouse'),
    ...(op.status === 'failed_unknown' ? { park: 'needs_reconciliation' as const } : {}),
  };
  const event = {
    ...(await executionAuditFields(deps.db, action, { auditHmacKey: deps.auditHmacKey, basis })),
    type: 'operation.replayed' as const,
    outcome: op.status,
    effectRef: op.evidence_ref,
  };
  const result = { queue: queueName(resultsQueue.base, job.release), jobId: resultsQueue.jobId(payload) };
  if (!(await recordAuditIfPublished(deps.db, event, result))) {
    const row = await inTransaction(deps.db, async (trx) => {
      const written = await enqueueInTransaction(trx, resultsQueue, payload);
      await recordAudit(trx, event);
      return written;
    });
    await deps.relay.publish([row]);
  }
  return { kind: 'replayed', status: op.status };
}

/**
 * Answers a claim that did not grant the lease (docs/decisions/0270-one-operation-protocol.md):
 * a finished operation replays its stored outcome (parking the run for reconciliation when it is
 * `failed_unknown`) audited `operation.replayed`; a key seen with another digest fails the action
 * (`idempotency_conflict`); an unusable approval, the run's deadline or an outage past its
 * ceiling answer `{executed: false}`; a re-evaluation publishes the new decision's jobs.
 */
export async function answerUnclaimed(
  deps: ExecutionDeps,
  job: ExecutionJob,
  claim: Exclude<ClaimOutcome, { kind: 'claimed' | 'held' }>,
  basis?: AuditBasis,
): Promise<ExecutionOutcome> {
  switch (claim.kind) {
    case 'skip':
      return { kind: 'skipped', reason: claim.reason };
    case 'busy':
      return { kind: 'busy', actionId: job.actionId };
    case 'replay':
      return replayStoredOutcome(deps, job, claim.action, claim.operation, basis);
    case 'conflict':
      await inTransaction(deps.db, async (trx) => {
        await transitionAction(trx, claim.action.id, { to: 'failed' });
        await recordAudit(trx, {
          ...(await executionAuditFields(trx, claim.action, { auditHmacKey: deps.auditHmacKey, basis })),
          type: 'operation.failed',
          outcome: 'idempotency_conflict',
        });
      });
      deps.log.error({ actionId: claim.action.id }, 'idempotency_conflict: key seen with another digest');
      await refuse(deps, job, claim.action, 'idempotency_conflict');
      return { kind: 'conflict' };
    case 'approval_unusable':
      if (claim.reason === 'approval_expired') return refuse(deps, job, claim.action, claim.reason, { stop: 'approval_expired' });
      return refuseUnusableApproval(deps, job, claim.action, claim.reason);
    case 'reevaluated':
      await deps.relay.publish(claim.rows);
      return { kind: 'reevaluated', outcome: claim.outcome };
    case 'deadline':
      return refuse(deps, job, claim.action, 'budget_exhausted', { stop: 'budget_exhausted' }, 'deadline');
    case 'outage':
      return refuse(deps, job, claim.action, DEPENDENCY_UNAVAILABLE, { stop: DEPENDENCY_UNAVAILABLE });
  }
}
