import { isFinishedOperation, leaseIsLive } from '@gatehouse/ledger';
import { CLAIMABLE } from '../../domain/claim.ts';
import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import type { ExecutionDeps } from '../execution-deps.ts';
import { replayStoredOutcome } from './answer.step.ts';
import type { ExecutionContext } from './containment.step.ts';

/**
 * Answers a redelivery from the operation read with the action, before the reads and the claim
 * (docs/decisions/0350-redelivery-without-a-claim.md): a finished operation replays its stored
 * outcome ({@link replayStoredOutcome}), and a live lease means another worker is executing it
 * (`busy`: the queue retries after backoff). Both are what the claim would answer under its
 * locks, since a finished operation never runs again and a live lease refuses the claim. Any
 * other case — no operation yet, pending, an expired lease, frozen by reconciliation, another
 * digest, a version or action status the claim skips, or the lease check switched off by a
 * control-removed test (`hooks.disableLease`) — returns null and goes on to the claim.
 */
export async function answerRedelivery(
  deps: Pick<ExecutionDeps, 'db' | 'relay' | 'auditHmacKey' | 'hooks'>,
  ctx: ExecutionContext,
): Promise<ExecutionOutcome | null> {
  const { operation: op, preview: action, job } = ctx;
  if (!op || op.frozen_at || op.action_digest !== action.digest) return null;
  if (action.version !== job.actionVersion || !CLAIMABLE.includes(action.status)) return null;
  if (isFinishedOperation(op.status)) return replayStoredOutcome(deps, job, action, op, ctx.auditBasis);
  if (leaseIsLive(op) && !deps.hooks.disableLease) return { kind: 'busy', actionId: job.actionId };
  return null;
}
