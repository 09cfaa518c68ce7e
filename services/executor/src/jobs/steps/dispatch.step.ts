import { hostname } from 'node:os';
import { loadWorld } from '@gatehouse/contracts';
import { mintDelegatedToken } from '@gatehouse/credentials';
import { DependencyUnavailable, inTransaction, isLegalWorkflowTransition, markDispatched, requireCredentialEpoch } from '@gatehouse/ledger';
import { MalformedRecord, readAuthoritative, type AuthoritativeRecord } from '@gatehouse/policy';
import { recordLimitRecheck } from '@gatehouse/telemetry';
import { reshipBaseline, resolveByReadBack, type AdapterResult } from '../../adapters/index.ts';
import { claimOperation, ContainmentHeldAtClaim, FactsChangedAtClaim, type ClaimOutcome } from '../../domain/claim.ts';
import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';
import { blockEventLoop, crashIfAt } from '../../domain/test-hooks.ts';
import type { ExecutionDeps } from '../execution-deps.ts';
import { stopPastCeilingOrHold } from './answer.step.ts';
import { auditHoldsNow } from './audit-gate.step.ts';
import { containmentAtClaim, containmentHoldsNow, type ExecutionContext } from './containment.step.ts';

/** Retry classes whose effect may be sent again by a new lease holder (same key, or a read). */
const RE_DISPATCHABLE = new Set(['idempotent_write', 'bounded_read']);

const owner = `${hostname()}:${process.pid}`;

/** A granted claim: the only state in which the adapter may be called. */
export type Claimed = Extract<ClaimOutcome, { kind: 'claimed' }>;

/**
 * True when the re-evaluation's read of a system of record failed because it is unavailable (the
 * policy's fact readers say so with {@link DependencyUnavailable}: refused, timed out, cut,
 * 408/429/5xx) or answered a body that is not the record asked for ({@link MalformedRecord}, ADR
 * 0640): either way the step is held rather than failed.
 */
function systemOfRecordDown(err: unknown): boolean {
  return err instanceof MalformedRecord || err instanceof DependencyUnavailable;
}

/** What the claim needs read before its transaction. */
export interface ClaimInputs {
  epoch: number;
  baseline: Record<string, unknown> | null;
  record: AuthoritativeRecord | null;
}

/**
 * The reads before the claim, none holding a lock: the revocation epoch read with the action (no
 * token without it, fail closed — ADR 0170; `hooks.epochFailOpen` mints with 0 in its control-removed test), the
 * baseline of a tool without downstream keys, and the authoritative facts for the re-evaluation
 * (an HTTP read, no credential); a reship whose baseline listing failed is held, never sent without
 * one (docs/decisions/0665-no-reship-without-a-baseline.md). A run the table does not let move to `executing` reads nothing
 * from a system of record (docs/product/states.md#transition-table). Returns the inputs, or the
 * outcome that holds (or past the ceiling stops) the step.
 */
export async function readClaimInputs(deps: ExecutionDeps, ctx: ExecutionContext): Promise<ClaimInputs | ExecutionOutcome> {
  const { wf, preview, tool } = ctx;
  const mayExecute = isLegalWorkflowTransition(wf.state, 'executing');
  let epoch: number;
  try {
    epoch = requireCredentialEpoch(ctx.credentialEpoch);
  } catch (err) {
    if (!(err instanceof DependencyUnavailable)) throw err;
    if (!deps.hooks.epochFailOpen) return stopPastCeilingOrHold(deps, ctx.job, preview, err);
    epoch = 0;
  }
  // Baseline for tools without downstream keys, read before the claim and committed with it.
  const baseline =
    mayExecute && tool.retryClass === 'at_most_once_readback'
      ? await reshipBaseline(deps.stagingUrl, String(preview.arguments.orderId))
      : null;
  if (preview.status !== 'approved' || !mayExecute) return { epoch, baseline, record: null };
  // No baseline, nothing sent: a lost answer could then never be decided by read-back (ADR 0017),
  // so the step is held like an outage of the order system until the listing answers (ADR 0665).
  if (baseline && baseline.shipments === null) {
    const orderId = String(preview.arguments.orderId);
    const down = new DependencyUnavailable(
      'system_of_record',
      `the order system did not list the shipments of ${orderId}: no read-back baseline, so the reship is not sent yet`,
    );
    return stopPastCeilingOrHold(deps, ctx.job, preview, down);
  }
  try {
    const args = preview.arguments as Record<string, string | number | null>;
    return { epoch, baseline, record: await readAuthoritative(deps.db, deps.stagingUrl, wf, { tool, args }) };
  } catch (err) {
    if (!systemOfRecordDown(err)) throw err;
    const down =
      err instanceof DependencyUnavailable ? err : new DependencyUnavailable('system_of_record', (err as Error).message, { cause: err });
    return stopPastCeilingOrHold(deps, ctx.job, preview, down);
  }
}

/**
 * The fenced claim in its own transaction (committed before any effect: write-ahead). Its policy
 * re-evaluation comes last, under the limit locks; when the decision changed, that transaction
 * rolls back and the claim runs again re-evaluating first, which records the new decision
 * (docs/decisions/0430-limit-locks-last-in-the-claim.md). Containment found holding the step by the
 * claim's checks (after the containment lock, ADR 0683) rolls it back too: `held`.
 */
export async function claim(deps: ExecutionDeps, ctx: ExecutionContext, inputs: ClaimInputs): Promise<ClaimOutcome> {
  const { hooks } = deps;
  const reevaluation = {
    wf: ctx.wf,
    bundles: deps.bundles,
    record: inputs.record,
    auditHmacKey: deps.auditHmacKey,
    disabled: hooks.disableReevaluation,
  };
  const attempt = (reevaluate: 'last' | 'first') =>
    inTransaction(deps.db, async (trx): Promise<ClaimOutcome> => {
      // Containment first, before any row lock of the claim; read by the checks' statement (ADR 0683).
      const containment = await containmentAtClaim(trx, ctx, hooks);
      return claimOperation(trx, ctx.job, {
        owner,
        leaseMs: deps.leaseMs,
        baseline: inputs.baseline,
        auditHmacKey: deps.auditHmacKey,
        auditBasis: ctx.auditBasis,
        userId: ctx.wf.user_id,
        reevaluation,
        bindDigest: !hooks.disableDigestBinding,
        honourLease: !hooks.disableLease,
        outagePolicy: deps.outagePolicy,
        reevaluate,
        ...(containment ? { containment } : {}),
      });
    });
  // A contained step rolls its claim's transaction back (the reservation with it) and is held.
  const held = (err: unknown) => {
    if (err instanceof ContainmentHeldAtClaim) return { kind: 'held' } as const;
    throw err;
  };
  try {
    return await attempt('last');
  } catch (err) {
    if (!(err instanceof FactsChangedAtClaim)) return held(err);
    recordLimitRecheck('claim', ctx.preview.tool);
    return attempt('first').catch(held);
  }
}

/**
 * Sends the effect of a granted claim, or resolves a former holder's: after a lease that expired
 * past its dispatch mark, a non-idempotent effect is resolved by read-back, never re-sent
 * (nothing visible yet is not proof: `unknown`). Otherwise the write-ahead mark is committed
 * under the fence, then the fixed adapter runs with a delegated token minted per request
 * (bound to key, fence and target; ADR 0170), asking the tool's containment again before a retry
 * (ADR 0700) and audit health (ADR 0706). Returns the adapter's result, or `fenced_out`.
 */
export async function dispatchEffect(
  deps: ExecutionDeps,
  ctx: ExecutionContext,
  c: Claimed,
  epoch: number,
  started: number,
): Promise<AdapterResult | { kind: 'fenced_out' }> {
  const { action, fencingToken } = c;
  const { hooks } = deps;
  const { wf, tool } = ctx;
  if (c.reclaimed && c.previouslyDispatched && !hooks.disableWriteAhead && !RE_DISPATCHABLE.has(tool.retryClass)) {
    const read =
      tool.retryClass === 'at_most_once_readback'
        ? await resolveByReadBack(
            { stagingUrl: deps.stagingUrl, baseline: c.baseline, ledger: deps.db, operationKey: action.operation_key },
            String(action.arguments.orderId),
            'lease_expired',
          )
        : null;
    return read && read.status === 'succeeded' ? read : { status: 'unknown', reason: 'lease_expired_after_dispatch', attempts: 0 };
  }
  if (hooks.blockBeforeDispatchMs) blockEventLoop(hooks.blockBeforeDispatchMs);
  crashIfAt(hooks, 'before_dispatch', action.tool);
  if (!hooks.disableWriteAhead && !(await markDispatched(deps.db, action.operation_key, fencingToken, epoch)))
    return { kind: 'fenced_out' };
  const user = loadWorld().users.find((u) => u.id === wf.user_id && u.tenant === wf.tenant);
  const result = await ctx.adapter({
    stagingUrl: deps.stagingUrl,
    ledger: deps.db,
    workflow: { id: wf.id, tenant: wf.tenant },
    args: action.arguments as Record<string, string | number | null>,
    operationKey: action.operation_key,
    freshKeyPerAttempt: hooks.disableIdempotencyKey,
    fencingToken,
    deadlineMs: started + deps.deadlineMs,
    // No retry past the run's own deadline (ADR 0772); the first attempt was admitted by the claim.
    runDeadlineMs: c.runDeadlineMs,
    baseline: c.baseline,
    // A retry after a switch-off is held, not sent (ADR 0700).
    heldByContainment: () => containmentHoldsNow(deps.db, ctx, hooks),
    // And one made while audit cannot be written is held as at the audit gate (ADR 0706).
    heldByAudit: () => auditHoldsNow(deps, ctx, hooks),
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
  return result;
}
