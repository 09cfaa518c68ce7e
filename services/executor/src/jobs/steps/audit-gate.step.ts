import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import { auditHealthProblem, auditHealthColumns, AuditUnavailable, type AuditHealthReading } from '@gatehouse/ledger';
import type { TestHooks } from '../../domain/test-hooks.ts';
import type { ExecutionDeps } from '../execution-deps.ts';
import { stopPastCeilingOrHold } from './answer.step.ts';
import type { ExecutionContext } from './containment.step.ts';

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
