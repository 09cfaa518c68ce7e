import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import {
  AUDIT_LOSS_RELEASE,
  auditHealthProblem,
  auditHealthColumns,
  AuditUnavailable,
  inTransaction,
  lockAuditLossHold,
  type AuditHealthReading,
} from '@gatehouse/ledger';
import type { TestHooks } from '../../domain/test-hooks.ts';
import type { ExecutionDeps } from '../execution-deps.ts';
import { stopPastCeilingOrHold } from './answer.step.ts';
import { pauseHeldRun, type ExecutionContext } from './containment.step.ts';

/**
 * Why the audit gate holds `ctx`'s step on `reading`, or null when it may go on: only a
 * consequential tool is gated (reads go on), judged by the ledger's one rule
 * (`auditHealthProblem` with the executor's thresholds, docs/product/invariants.md#evidence).
 */
function auditHolds(
  deps: Pick<ExecutionDeps, 'auditGate'>,
  ctx: Pick<ExecutionContext, 'tool'>,
  reading: AuditHealthReading,
): string | null {
  return ctx.tool.consequential ? auditHealthProblem(reading, deps.auditGate) : null;
}

/**
 * Evidence gates effects (docs/product/invariants.md#evidence): with audit storage unhealthy a
 * consequential step is held (its wait credited, its next step saying so) before anything is
 * consumed or claimed; reads go on. Judged on the readings taken with the action. Returns
 * `waiting` (or the stop past the outage ceiling), or null when the step may go on. Also the
 * outcome of a retry the gate held after the claim (ADR 0706): the operation is then back to
 * `pending` and the step is held exactly as here.
 */
export async function gateOnAuditHealth(
  deps: Pick<ExecutionDeps, 'db' | 'relay' | 'outagePolicy' | 'auditGate'>,
  ctx: ExecutionContext,
): Promise<ExecutionOutcome | null> {
  const unhealthy = auditHolds(deps, ctx, ctx.auditHealth);
  if (!unhealthy) return null;
  return stopPastCeilingOrHold(deps, ctx.job, ctx.preview, new AuditUnavailable(unhealthy));
}

/**
 * Whether the audit gate holds `ctx`'s step now, on a fresh reading (one statement): asked by an
 * idempotent write before a retry that would be a new effect
 * (docs/decisions/0706-a-retry-waits-for-audit.md). Always false with
 * `hooks.auditNotRecheckedBeforeRetry` (its control-removed test).
 * @throws the ledger's error when the read fails (the adapter's attempt then fails with it).
 */
export async function auditHoldsNow(
  deps: Pick<ExecutionDeps, 'db' | 'auditGate'>,
  ctx: Pick<ExecutionContext, 'tool'>,
  hooks: Pick<TestHooks, 'auditNotRecheckedBeforeRetry'>,
): Promise<boolean> {
  if (hooks.auditNotRecheckedBeforeRetry || !ctx.tool.consequential) return false;
  const reading = await deps.db.selectNoFrom([...auditHealthColumns]).executeTakeFirstOrThrow();
  return auditHolds(deps, ctx, reading) !== null;
}

/**
 * A lost audit tail holds consequential steps (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md):
 * while the audit-loss hold is raised (read with the action, no statement of its own) a
 * consequential step pauses its run — checked again under the hold's row lock, so an
 * acknowledgement commits before the check (the step runs) or after the pause (it releases the
 * run) — with a next step naming the command that releases it, audited `run.paused`
 * (`audit_loss`). Nothing is claimed or consumed; reads go on. Returns `held`, or null when the
 * step may go on.
 */
export async function holdOnAuditLoss(deps: Pick<ExecutionDeps, 'db'>, ctx: ExecutionContext): Promise<ExecutionOutcome | null> {
  if (!ctx.auditLossHold || !ctx.tool.consequential) return null;
  const held = await inTransaction(deps.db, async (trx) => {
    const hold = await lockAuditLossHold(trx, 'share');
    if (!hold) return false;
    const nextStep = `The audit chain lost events already witnessed outside the ledger (${hold.reason}); consequential steps are held until an operator acknowledges the loss (${AUDIT_LOSS_RELEASE}), then the workflow resumes.`;
    await pauseHeldRun(trx, ctx, nextStep, 'audit_loss');
    return true;
  });
  return held ? { kind: 'held', reason: 'audit_loss' } : null;
}
