import { ConflictError, type ExecutionJob } from '@gatehouse/contracts';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { AUDIT_HELD_BEFORE_RETRY, HELD_BEFORE_RETRY } from '../adapters/index.ts';
import { toJobResult, type ExecutionOutcome } from '../domain/execution-outcome.ts';
import type { ExecutionDeps } from './execution-deps.ts';
import { answerUnclaimed } from './steps/answer.step.ts';
import { gateOnAuditHealth, holdOnAuditLoss } from './steps/audit-gate.step.ts';
import { holdAfterClaimCheck, holdIfSwitchedOff, loadExecutionContext } from './steps/containment.step.ts';
import { claim, dispatchEffect, readClaimInputs } from './steps/dispatch.step.ts';
import { recordResult } from './steps/record.step.ts';
import { answerRedelivery } from './steps/redelivery.step.ts';

export type { ExecutionDeps } from './execution-deps.ts';

/** Thrown when another worker holds a live lease (reason `lease_busy`, 409): the queue retries after backoff. */
export class LeaseBusy extends ConflictError {
  constructor(message: string) {
    super('lease_busy', message);
  }
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

/**
 * The steps of one execution, each returning an {@link ExecutionOutcome} or handing over:
 * containment (switch → pause), a lost audit tail (→ pause until acknowledged, ADR 0795), the audit gate, a redelivery answered from the ledger
 * (ADR 0350), the reads before the claim, the fenced claim
 * (with approval consumption and the re-evaluation), the effect (write-ahead mark, token, adapter
 * or read-back) and the fenced record (docs/decisions/0270-one-operation-protocol.md); a retry
 * held by a switch-off is reset to pending and paused (ADR 0700), one held by the audit gate is
 * reset to pending and held as at that gate (ADR 0706).
 */
export async function executeSteps(job: ExecutionJob, deps: ExecutionDeps): Promise<ExecutionOutcome> {
  const ctx = await loadExecutionContext(deps.db, job);
  const held =
    (await holdIfSwitchedOff(deps.db, ctx, deps.hooks)) ?? (await holdOnAuditLoss(deps, ctx)) ?? (await gateOnAuditHealth(deps, ctx));
  if (held) return held;
  const redelivered = await answerRedelivery(deps, ctx);
  if (redelivered) return redelivered;
  const inputs = await readClaimInputs(deps, ctx);
  if ('kind' in inputs) return inputs;
  const c = await claim(deps, ctx, inputs);
  if (c.kind === 'held') return holdAfterClaimCheck(deps.db, job, deps.hooks);
  if (c.kind !== 'claimed') return answerUnclaimed(deps, job, c, ctx.auditBasis);
  const started = Date.now();
  const result = await dispatchEffect(deps, ctx, c, inputs.epoch, started);
  if ('kind' in result) return result;
  const out = await recordResult(deps, ctx, c, result, started);
  // A retry the tool's switch held (ADR 0700): reset to pending, the run pauses as at the containment step.
  if (out.kind === 'retry_safe' && out.reason === HELD_BEFORE_RETRY) return holdAfterClaimCheck(deps.db, job, deps.hooks);
  // A retry the audit gate held (ADR 0706): reset to pending, held as at the audit gate (or, healthy
  // again by now, repeated by the queue).
  if (out.kind === 'retry_safe' && out.reason === AUDIT_HELD_BEFORE_RETRY)
    return (await gateOnAuditHealth(deps, await loadExecutionContext(deps.db, job))) ?? out;
  return out;
}

/**
 * Executes one action version exactly once (queue `executions`): switch check at the moment of
 * execution, fenced claim with approval consumption and write-ahead mark, a freshly minted
 * delegated token per attempt, the fixed adapter with its deadline and effect-aware retries,
 * then the result recorded under the fencing token before the `results` job is written. A
 * redelivery of a finished operation replays its stored outcome. Maps the outcome to the job's
 * result in this one place ({@link toJobResult}).
 * @throws LeaseBusy while another worker's lease is live; SafeToRepeat after a proven non-effect;
 *   DependencyUnavailable while a dependency is down (within the outage ceiling).
 */
export async function processExecution(job: ExecutionJob, deps: ExecutionDeps): Promise<string> {
  const r = toJobResult(await executeSteps(job, deps), {
    busy: (m) => new LeaseBusy(m),
    retrySafe: (m) => new SafeToRepeat(m),
  });
  if ('error' in r) throw r.error;
  return r.value;
}
