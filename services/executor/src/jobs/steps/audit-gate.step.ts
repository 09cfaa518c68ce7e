import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import { auditHealthProblem, AuditUnavailable } from '@gatehouse/ledger';
import type { ExecutionDeps } from '../execution-deps.ts';
import { stopPastCeilingOrHold } from './answer.step.ts';
import type { ExecutionContext } from './containment.step.ts';

/**
 * Evidence gates effects (docs/product/invariants.md#evidence): with audit storage unhealthy a
 * consequential step is held (its wait credited, its next step saying so) before anything is
 * consumed or claimed; reads go on. Judged on the readings taken with the action. Returns
 * `waiting` (or the stop past the outage ceiling), or null when the step may go on.
 */
export async function gateOnAuditHealth(
  deps: Pick<ExecutionDeps, 'db' | 'relay' | 'outagePolicy' | 'auditGate'>,
  ctx: ExecutionContext,
): Promise<ExecutionOutcome | null> {
  if (!ctx.tool.consequential) return null;
  const unhealthy = auditHealthProblem(ctx.auditHealth, deps.auditGate);
  if (!unhealthy) return null;
  return stopPastCeilingOrHold(deps, ctx.job, ctx.preview, new AuditUnavailable(unhealthy));
}
