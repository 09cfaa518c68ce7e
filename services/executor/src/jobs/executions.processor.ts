import { hostname } from 'node:os';
import { sql } from 'kysely';
import { resultsQueue, type ExecutionJob } from '@gatehouse/contracts';
import { mintDelegatedToken, type DelegationSigningKey } from '@gatehouse/credentials';
import {
  enqueueInTransaction,
  inTransaction,
  isLegalWorkflowTransition,
  LIVE_STATES,
  recordAudit,
  transitionAction,
  transitionWorkflow,
  DEPENDENCY_UNAVAILABLE,
  DependencyUnavailable,
  outageOutlasted,
  readCredentialEpoch,
  type Db,
  type OutagePolicy,
  type OutboxRow,
} from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import { findTool, toSafeOutput, type SafeOutput } from '@gatehouse/tools';
import { loadWorld } from '@gatehouse/contracts';
import { adapters, resolveByReadBack, shipmentCount, type AdapterResult } from '../adapters/index.ts';
import { blockEventLoop, crashIfAt, type TestHooks } from '../domain/test-hooks.ts';
import { auditUnhealthyReason, AuditUnavailable, type AuditGate } from '../domain/audit-health.ts';
import { readAuthoritative, type AuthoritativeRecord, type PolicyBundles } from '@gatehouse/policy';
import { claimOperation } from '../domain/claim.ts';
import { executionAuditFields } from '../domain/execution-audit.ts';

/** Dependencies of {@link processExecution}. */
export interface ExecutionDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  stagingUrl: string;
  /** Ed25519 key minting delegated tokens (only the minting side holds it). */
  signingKey: DelegationSigningKey;
  auditHmacKey: string;
  /** Lease length, ms; longer than the adapter deadline. */
  leaseMs: number;
  /** Adapter deadline per execution, ms. */
  deadlineMs: number;
  agentId: string;
  /** Fault hooks set only by tests (crash points, blocking, write-ahead removal). */
  hooks: TestHooks;
  /** Active policy bundle of each pack, for the re-evaluation at execution. */
  bundles: PolicyBundles;
  /** Audit-health thresholds checked before any consequential step. */
  auditGate: AuditGate;
  /** Outage ceiling and crediting (the wait for an unavailable dependency is not working time). */
  outagePolicy: OutagePolicy;
}

/** Thrown when another worker holds a live lease: the queue retries after backoff. */
export class LeaseBusy extends Error {
  override name = 'LeaseBusy';
}

/**
 * Thrown when read-back proved a non-idempotent effect did not happen (the system of record
 * refused the connection or lost the answer): the job is held for it and then repeated.
 */
export class SafeToRepeat extends DependencyUnavailable {
  override name = 'SafeToRepeat';
  constructor(message: string) {
    super('system_of_record', message);
  }
}

/** Retry classes whose effect may be sent again by a new lease holder (same key, or a read). */
const RE_DISPATCHABLE = new Set(['idempotent_write', 'bounded_read']);

const owner = `${hostname()}:${process.pid}`;

/**
 * True when a read of a system of record failed because it is unavailable: no answer (refused,
 * reset, timed out) or a 408/429/5xx status ("… answered 503" from the policy's fact readers).
 */
function systemOfRecordDown(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'TimeoutError' || err.name === 'AbortError' || (err.name === 'TypeError' && err.message === 'fetch failed')) return true;
  return /answered (5\d\d|408|429)$/.test(err.message);
}

/** How a result moves its run besides answering the call: parked for reconciliation, or stopped. */
type ResultEffect = {
  park?: 'needs_reconciliation';
  stop?: 'approval_expired' | 'tool_disabled' | 'budget_exhausted' | 'dependency_unavailable';
};

async function publishResult(
  deps: ExecutionDeps,
  job: ExecutionJob,
  callId: string,
  output: SafeOutput,
  extra: ResultEffect = {},
): Promise<void> {
  const rows = await inTransaction(deps.db, async (trx) => [
    await enqueueInTransaction(trx, resultsQueue, { release: job.release, workflowId: job.workflowId, callId, output, ...extra }),
  ]);
  await deps.relay.publish(rows);
}

/**
 * Answers the call of an action that did not run: `{executed: false, reason}`, labelled as
 * Gatehouse's own output, and `extra` (e.g. the stop it causes). Returns `refused:<reason>`.
 */
async function refuse(
  deps: ExecutionDeps,
  job: ExecutionJob,
  action: { call_id: string; tool: string },
  reason: string,
  extra: ResultEffect = {},
): Promise<string> {
  await publishResult(deps, job, action.call_id, toSafeOutput(action.tool, { executed: false, reason }, 'gatehouse'), extra);
  return `refused:${reason}`;
}

/**
 * A step held before its claim (audit storage unhealthy, the authoritative read failing) would
 * never reach the claim's working-time check while the dependency stays down: past the outage
 * ceiling it stops the run here (`dependency_unavailable`; nothing was claimed or consumed),
 * otherwise it throws `down` and the worker holds the job.
 * @throws DependencyUnavailable `down` while the outage is within the ceiling.
 */
async function stopPastCeilingOrHold(
  deps: ExecutionDeps,
  job: ExecutionJob,
  callId: string,
  tool: string,
  down: DependencyUnavailable,
): Promise<string> {
  if (!outageOutlasted(job.outage, deps.outagePolicy)) throw down;
  return refuse(deps, job, { call_id: callId, tool }, DEPENDENCY_UNAVAILABLE, { stop: DEPENDENCY_UNAVAILABLE });
}

/**
 * Executes one action version exactly once (queue `executions`): switch check at the moment of
 * execution, fenced claim with approval consumption and write-ahead mark, a freshly minted
 * delegated token per attempt, the fixed adapter with its deadline and effect-aware retries,
 * then the result recorded under the fencing token before the `results` job is written. A
 * redelivery of a finished operation replays its stored outcome.
 */
export async function processExecution(job: ExecutionJob, deps: ExecutionDeps): Promise<string> {
  const { db } = deps;
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).executeTakeFirstOrThrow();
  const preview = await db.selectFrom('actions').selectAll().where('id', '=', job.actionId).executeTakeFirstOrThrow();
  const tool = findTool(preview.tool);
  const adapter = adapters[preview.tool];
  if (!tool || !adapter) throw new Error(`no adapter for ${preview.tool}`);

  // Containment at the moment of effect: a switched-off tool holds the step (docs/product/invariants.md#containment).
  const sw = await db.selectFrom('tool_switches').select(['enabled', 'changed_at']).where('tool', '=', preview.tool).executeTakeFirst();
  // Control-removed test only: the switch as it stood when the action was admitted.
  const offAtAdmission = sw && deps.hooks.switchAtAdmissionOnly && sw.changed_at > preview.created_at ? false : sw && !sw.enabled;
  if (offAtAdmission) {
    await inTransaction(db, async (trx) => {
      const paused = await transitionWorkflow(trx, wf.id, {
        to: 'paused',
        nextStep: `Tool ${preview.tool} is switched off; the workflow resumes when on-call switches it on.`,
        onlyFrom: LIVE_STATES.filter((s) => s !== 'paused'),
      });
      if (!paused) return; // already paused (another held step, a redelivery) or terminal
      // The pause is on-call's, not the run's working time: credited back when it resumes.
      await trx
        .updateTable('budgets')
        .set({ paused_at: sql`coalesce(paused_at, now())` })
        .where('workflow_id', '=', wf.id)
        .execute();
      await recordAudit(trx, {
        type: 'run.paused',
        service: 'executor',
        runId: wf.id,
        tool: preview.tool,
        actionVersion: preview.version,
        outcome: 'tool_disabled',
        revisions: { release: wf.release_id },
      });
    });
    return 'held:tool_disabled';
  }

  // Evidence gates effects: with audit storage unhealthy a consequential step is held (its wait
  // credited, its next step saying so) before anything is consumed or claimed; reads go on.
  if (tool.consequential) {
    const unhealthy = await auditUnhealthyReason(db, deps.auditGate);
    if (unhealthy) return stopPastCeilingOrHold(deps, job, preview.call_id, preview.tool, new AuditUnavailable(unhealthy));
  }

  // A run the table does not let move to `executing` (terminal, or still `received`): the claim
  // refuses it, so nothing is read from a system of record for it (docs/product/states.md#transition-table).
  const mayExecute = isLegalWorkflowTransition(wf.state, 'executing');
  // No token without the revocation epoch (fail closed): held like any dependency fault, before
  // anything is claimed or consumed (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
  let epoch: number;
  try {
    epoch = await readCredentialEpoch(db);
  } catch (err) {
    if (!(err instanceof DependencyUnavailable)) throw err;
    if (deps.hooks.epochFailOpen) epoch = 0;
    else return stopPastCeilingOrHold(deps, job, preview.call_id, preview.tool, err);
  }

  // Baseline for tools without downstream keys, read before the claim and committed with it.
  const baseline =
    mayExecute && tool.retryClass === 'at_most_once_readback'
      ? { shipments: await shipmentCount(deps.stagingUrl, String(preview.arguments.orderId)) }
      : null;
  // Authoritative facts for the re-evaluation at execution (a read, no credential).
  let record: AuthoritativeRecord | null = null;
  if (preview.status === 'approved' && mayExecute) {
    try {
      record = await readAuthoritative(db, deps.stagingUrl, wf, {
        tool,
        args: preview.arguments as Record<string, string | number | null>,
      });
    } catch (err) {
      if (!systemOfRecordDown(err)) throw err;
      const down = new DependencyUnavailable('system_of_record', (err as Error).message, { cause: err });
      return stopPastCeilingOrHold(deps, job, preview.call_id, preview.tool, down);
    }
  }
  const reevaluation = { wf, bundles: deps.bundles, record, auditHmacKey: deps.auditHmacKey, disabled: deps.hooks.disableReevaluation };
  const claim = await inTransaction(db, (trx) =>
    claimOperation(trx, job, {
      owner,
      leaseMs: deps.leaseMs,
      baseline,
      auditHmacKey: deps.auditHmacKey,
      userId: wf.user_id,
      reevaluation,
      bindDigest: !deps.hooks.disableDigestBinding,
      honourLease: !deps.hooks.disableLease,
      outagePolicy: deps.outagePolicy,
    }),
  );

  switch (claim.kind) {
    case 'skip':
      return `skip:${claim.reason}`;
    case 'busy':
      throw new LeaseBusy(`operation of action ${job.actionId} is leased by another worker`);
    case 'replay': {
      const stored = claim.operation.result as SafeOutput | null;
      const output = stored ?? toSafeOutput(claim.action.tool, { executed: false, status: claim.operation.status }, 'gatehouse');
      await publishResult(
        deps,
        job,
        claim.action.call_id,
        output,
        claim.operation.status === 'failed_unknown' ? { park: 'needs_reconciliation' } : {},
      );
      await inTransaction(db, async (trx) =>
        recordAudit(trx, {
          ...(await executionAuditFields(trx, claim.action, { auditHmacKey: deps.auditHmacKey })),
          type: 'operation.replayed',
          outcome: claim.operation.status,
          effectRef: claim.operation.evidence_ref,
        }),
      );
      return `replay:${claim.operation.status}`;
    }
    case 'conflict':
      await inTransaction(db, async (trx) => {
        await transitionAction(trx, claim.action.id, { to: 'failed' });
        await recordAudit(trx, {
          ...(await executionAuditFields(trx, claim.action, { auditHmacKey: deps.auditHmacKey })),
          type: 'operation.failed',
          outcome: 'idempotency_conflict',
        });
      });
      deps.log.error({ actionId: claim.action.id }, 'idempotency_conflict: key seen with another digest');
      await refuse(deps, job, claim.action, 'idempotency_conflict');
      return 'conflict';
    case 'approval_unusable':
      return refuse(deps, job, claim.action, claim.reason, claim.reason === 'approval_expired' ? { stop: 'approval_expired' } : {});
    case 'reevaluated':
      await deps.relay.publish(claim.rows);
      return `reevaluated:${claim.outcome}`;
    case 'deadline':
      await refuse(deps, job, claim.action, 'budget_exhausted', { stop: 'budget_exhausted' });
      return 'refused:deadline';
    case 'outage':
      return refuse(deps, job, claim.action, DEPENDENCY_UNAVAILABLE, { stop: DEPENDENCY_UNAVAILABLE });
    case 'claimed':
      break;
  }

  const { action, fencingToken } = claim;
  const hooks = deps.hooks;
  const started = Date.now();
  let result: AdapterResult;
  if (claim.reclaimed && claim.previouslyDispatched && !hooks.disableWriteAhead && !RE_DISPATCHABLE.has(tool.retryClass)) {
    // A former lease holder may have sent a non-idempotent effect: resolve by read-back, never
    // by re-dispatch. Nothing visible yet is not proof (its request may still be in flight).
    const read =
      tool.retryClass === 'at_most_once_readback'
        ? await resolveByReadBack(
            { stagingUrl: deps.stagingUrl, baseline: claim.baseline },
            String(action.arguments.orderId),
            'lease_expired',
          )
        : null;
    result = read && read.status === 'succeeded' ? read : { status: 'unknown', reason: 'lease_expired_after_dispatch', attempts: 0 };
  } else {
    if (hooks.blockBeforeDispatchMs) blockEventLoop(hooks.blockBeforeDispatchMs);
    crashIfAt(hooks, 'before_dispatch', action.tool);
    if (!hooks.disableWriteAhead) {
      const marked = await db
        .updateTable('operations')
        // The epoch the token will carry, for the containment monitor (docs/decisions/0280).
        .set({ dispatched_at: new Date(), updated_at: new Date(), token_epoch: epoch })
        .where('key', '=', action.operation_key)
        .where('fencing_token', '=', String(fencingToken))
        .where('status', '=', 'running')
        .returning('key')
        .executeTakeFirst();
      if (!marked) return 'fenced_out';
    }
    const user = loadWorld().users.find((u) => u.id === wf.user_id && u.tenant === wf.tenant);
    result = await adapter({
      stagingUrl: deps.stagingUrl,
      ledger: db,
      workflow: { id: wf.id, tenant: wf.tenant },
      args: action.arguments as Record<string, string | number | null>,
      operationKey: action.operation_key,
      freshKeyPerAttempt: hooks.disableIdempotencyKey,
      fencingToken,
      deadlineMs: started + deps.deadlineMs,
      baseline: claim.baseline,
      token: (target, op) =>
        mintDelegatedToken(
          {
            sub: wf.user_id,
            act: { sub: deps.agentId },
            aud: tool.downstream,
            scope: tool.scope,
            tenant: wf.tenant,
            ceiling: user?.refundCeiling ?? 0,
            epoch,
            op: op ?? action.operation_key,
            fence: fencingToken,
            target,
          },
          deps.signingKey,
        ),
    });
    crashIfAt(hooks, 'after_dispatch', action.tool);
  }

  if (result.status === 'retry_safe') {
    // Read-back proved nothing happened: back to pending (fenced) and let the queue repeat it.
    const safeReason = result.reason;
    const reset = await inTransaction(db, async (trx) => {
      await trx.selectFrom('actions').select('id').where('id', '=', action.id).forUpdate().execute();
      const r = await trx
        .updateTable('operations')
        .set({
          status: 'pending',
          lease_owner: null,
          lease_expires_at: null,
          dispatched_at: null,
          error: safeReason,
          updated_at: new Date(),
        })
        .where('key', '=', action.operation_key)
        .where('fencing_token', '=', String(fencingToken))
        .where('status', '=', 'running')
        .returning('key')
        .executeTakeFirst();
      if (r) await transitionAction(trx, action.id, { to: 'approved' });
      return r;
    });
    if (!reset) return 'fenced_out';
    throw new SafeToRepeat(`${action.tool} not executed (${safeReason}); safe to repeat`);
  }

  if (result.status === 'succeeded' && !hooks.disableOutputBoundary) {
    // Project onto the tool's output contract; a malformed result never reaches the model. For a
    // write the effect may exist, so the outcome is unknown rather than failed.
    const projected = tool.output.safeParse(result.data);
    if (projected.success) result = { ...result, data: projected.data };
    else if (tool.effectClass === 'sensitive_read')
      result = { status: 'failed', reason: 'malformed_result', retryable: false, attempts: result.attempts };
    else result = { status: 'unknown', reason: 'malformed_result', attempts: result.attempts };
  }
  const opStatus = result.status === 'succeeded' ? 'succeeded' : result.status === 'failed' ? 'failed' : 'failed_unknown';
  // A downstream that refuses on its own authority (e.g. the payments ledger's ceiling) denies the step.
  const actionStatus = result.status === 'failed' && /^40[13]:/.test(result.reason) ? 'denied' : opStatus;
  const data = result.status === 'succeeded' ? result.data : { reason: result.reason };
  const outcome =
    opStatus === 'failed_unknown'
      ? { executed: false, status: 'unknown', next: 'reconciliation', reason: result.status === 'unknown' ? result.reason : null }
      : { executed: result.status === 'succeeded', status: actionStatus === 'denied' ? 'denied' : opStatus, ...data };
  // The untrusted-output boundary (redaction, bounds, provenance label); off only in a control-removed test.
  const output = hooks.disableOutputBoundary
    ? { source: action.tool, trust: 'untrusted-tool-output' as const, ...outcome }
    : toSafeOutput(action.tool, outcome, 'untrusted-tool-output', tool.sensitive);
  const rows = await inTransaction(db, async (trx) => {
    await trx.selectFrom('actions').select('id').where('id', '=', action.id).forUpdate().execute(); // lock order: actions → operations
    const recorded = await trx
      .updateTable('operations')
      .set({
        status: opStatus,
        result: JSON.stringify(output),
        evidence_ref: result.status === 'succeeded' ? result.evidenceRef : null,
        error: result.status === 'succeeded' ? null : result.reason,
        lease_owner: null,
        lease_expires_at: null,
        updated_at: new Date(),
      })
      .where('key', '=', action.operation_key)
      .where('fencing_token', '=', String(fencingToken))
      .where('status', '=', 'running')
      .returning('key')
      .executeTakeFirst();
    if (!recorded) return null; // fenced out: a newer lease holder owns the outcome
    await transitionAction(trx, action.id, { to: actionStatus });
    await recordAudit(trx, {
      ...(await executionAuditFields(trx, action, { auditHmacKey: deps.auditHmacKey })),
      type: opStatus === 'succeeded' ? 'operation.succeeded' : opStatus === 'failed' ? 'operation.failed' : 'operation.unknown',
      outcome: result.status === 'succeeded' ? 'succeeded' : result.reason.slice(0, 120),
      effectRef: result.status === 'succeeded' ? result.evidenceRef : null,
      attempts: result.attempts,
      latencyMs: Date.now() - started,
    });
    const park = opStatus === 'failed_unknown' ? ({ park: 'needs_reconciliation' } as const) : {};
    return [
      await enqueueInTransaction(trx, resultsQueue, { release: job.release, workflowId: wf.id, callId: action.call_id, output, ...park }),
    ] as OutboxRow[];
  });
  if (!rows) {
    deps.log.warn({ actionId: action.id, fencingToken }, 'result refused: stale fencing token');
    return 'fenced_out';
  }
  if (opStatus === 'failed_unknown')
    deps.log.error(
      { alert: 'failed_unknown', tool: action.tool, workflowId: wf.id, reason: result.status === 'unknown' ? result.reason : '' },
      'effect outcome unknown: reconciliation required',
    );
  crashIfAt(hooks, 'after_record', action.tool);
  await deps.relay.publish(rows);
  return opStatus;
}
