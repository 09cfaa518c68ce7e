import { ownCredentialRefused, resultsQueue } from '@gatehouse/contracts';
import { outboxJob, recordOutcomeWithJob, resetToPending, retryFencedWrite, type OutboxRow, type Trx } from '@gatehouse/ledger';
import { boundReason, toSafeOutput } from '@gatehouse/tools';
import type { AdapterResult } from '../../adapters/index.ts';
import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import { crashIfAt } from '../../domain/test-hooks.ts';
import type { ExecutionDeps } from '../execution-deps.ts';
import type { ExecutionContext } from './containment.step.ts';
import type { Claimed } from './dispatch.step.ts';

type Finished = Exclude<AdapterResult, { status: 'retry_safe' }>;

/**
 * Projects a succeeded result onto the tool's output contract: a malformed result never reaches
 * the model; for a write the effect may exist, so it becomes unknown rather than failed. The
 * effect's reference (the downstream's id for it, kept in the operation and the audit event) is
 * the downstream's untrusted text: redacted and bounded (`boundReason`, ADR 0710).
 * `disabled` only in the control-removed test of the output boundary.
 */
export function projectResult(ctx: Pick<ExecutionContext, 'tool'>, result: Finished, disabled: boolean): Finished {
  if (result.status !== 'succeeded' || disabled) return result;
  const projected = ctx.tool.output.safeParse(result.data);
  const evidenceRef = result.evidenceRef === null ? null : boundReason(result.evidenceRef);
  if (projected.success) return { ...result, data: projected.data, evidenceRef };
  if (ctx.tool.effectClass === 'sensitive_read')
    return { status: 'failed', reason: 'malformed_result', retryable: false, attempts: result.attempts };
  return { status: 'unknown', reason: 'malformed_result', attempts: result.attempts };
}

/**
 * The statuses and the answer of a finished result: the operation's (`failed_unknown` on any
 * ambiguity), the action's (`denied` when the downstream refused on its own authority, 401/403 —
 * but `failed` when it refused our own delegated credential, `ownCredentialRefused`: a broken
 * key is our failure, for on-call, not a business denial), and the output through the
 * untrusted-output boundary (off only in its control-removed test).
 */
export function outcomeOf(ctx: Pick<ExecutionContext, 'tool'>, action: Claimed['action'], result: Finished, noBoundary: boolean) {
  const opStatus = result.status === 'succeeded' ? 'succeeded' : result.status === 'failed' ? 'failed' : 'failed_unknown';
  const refusedOnAuthority = result.status === 'failed' && /^40[13]:/.test(result.reason) && !ownCredentialRefused(result.reason);
  const actionStatus = refusedOnAuthority ? 'denied' : opStatus;
  const data = result.status === 'succeeded' ? result.data : { reason: result.reason };
  const outcome =
    opStatus === 'failed_unknown'
      ? { executed: false, status: 'unknown', next: 'reconciliation', reason: result.status === 'unknown' ? result.reason : null }
      : { executed: result.status === 'succeeded', status: actionStatus === 'denied' ? 'denied' : opStatus, ...data };
  const output = noBoundary
    ? { source: action.tool, trust: 'untrusted-tool-output' as const, ...outcome }
    : toSafeOutput(action.tool, outcome, 'untrusted-tool-output', ctx.tool.sensitive);
  return { opStatus, actionStatus, output } as const;
}

/**
 * Records a result under the fencing token (operation protocol): read-back that proved nothing
 * happened resets the operation to pending (`retry_safe`: the queue repeats it); any other result
 * is written with the action's transition, its audit event and the `results` job by one
 * statement (ADR 0540), then published. A stale token writes nothing (`fenced_out`). Either write
 * is repeated after a lost connection while the claim's lease (`deps.leaseMs` from `started`)
 * lasts ({@link retryFencedWrite}, ADR 0696): the result is known only here.
 * @throws the record's error when it is not a connection fault or the lease is over.
 */
export async function recordResult(
  deps: ExecutionDeps,
  ctx: ExecutionContext,
  c: Claimed,
  raw: AdapterResult,
  started: number,
): Promise<ExecutionOutcome> {
  const { action, fencingToken } = c;
  const fenced = { actionId: action.id, key: action.operation_key, fencingToken };
  const write = <T>(fn: (trx: Trx) => Promise<T>): Promise<T> =>
    retryFencedWrite(deps.db, fn, started + deps.leaseMs, deps.hooks.disableRecordRetry);
  if (raw.status === 'retry_safe') {
    const reset = await write((trx) => resetToPending(trx, { ...fenced, reason: raw.reason }));
    return reset ? { kind: 'retry_safe', tool: action.tool, reason: raw.reason } : { kind: 'fenced_out' };
  }
  const result = projectResult(ctx, raw, deps.hooks.disableOutputBoundary);
  const { opStatus, actionStatus, output } = outcomeOf(ctx, action, result, deps.hooks.disableOutputBoundary);
  const ok = result.status === 'succeeded';
  const park = opStatus === 'failed_unknown' ? ({ park: 'needs_reconciliation' } as const) : {};
  const payload = { release: ctx.job.release, workflowId: ctx.wf.id, callId: action.call_id, output, ...park };
  const event = {
    ...c.audit,
    type: opStatus === 'succeeded' ? 'operation.succeeded' : opStatus === 'failed' ? 'operation.failed' : 'operation.unknown',
    outcome: ok ? 'succeeded' : result.reason.slice(0, 120),
    effectRef: ok ? result.evidenceRef : null,
    attempts: result.attempts,
    latencyMs: Date.now() - started,
  } as const;
  // The outcome, the action's move, the `results` job and its audit event in one statement, written
  // only for the holder of the fencing token (ADR 0540); null when a newer lease holder owns it.
  const next = await write((trx) =>
    recordOutcomeWithJob(
      trx,
      {
        ...fenced,
        status: opStatus,
        actionStatus,
        result: output,
        evidenceRef: ok ? result.evidenceRef : null,
        error: ok ? null : result.reason,
      },
      { job: outboxJob(resultsQueue, payload), audit: event },
    ),
  );
  const rows: OutboxRow[] | null = next ? [next] : null;
  if (!rows) {
    // A newer lease holder owns the operation, or an earlier try's COMMIT landed with its answer lost.
    deps.log.warn({ actionId: action.id, fencingToken }, 'result refused: stale fencing token, or already recorded');
    return { kind: 'fenced_out' };
  }
  if (opStatus === 'failed_unknown')
    deps.log.error(
      { alert: 'failed_unknown', tool: action.tool, workflowId: ctx.wf.id, reason: result.status === 'unknown' ? result.reason : '' },
      'effect outcome unknown: reconciliation required',
    );
  crashIfAt(deps.hooks, 'after_record', action.tool);
  await deps.relay.publish(rows);
  return { kind: 'executed', status: opStatus };
}
