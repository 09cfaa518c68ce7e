import { Router } from 'express';
import { z } from 'zod';
import { Forbidden, NotFound, parseBody } from '@gatehouse/platform';
import { listingBody, pageOf, PageQuery, parseQuery } from './query.parser.ts';
import type { StagingDb } from '../db/staging.database.ts';
import type { OrdersRepository } from '../repositories/orders.repository.ts';
import type { RefundsRepository } from '../repositories/refunds.repository.ts';
import type { ReversalsRepository } from '../repositories/reversals.repository.ts';
import {
  assertSameTenant,
  orderOfTenant,
  bindDelegation,
  readFencingToken,
  requireDelegation,
  requireIdempotencyKey,
  type DelegationVerifier,
  withEpochFence,
} from './delegation.guard.ts';
import { effectRoute, type EffectRouteDeps } from './effect.route.ts';
import { testFaults } from '@gatehouse/contracts';

/** Delegation audience of the payments ledger (docs/product/policy-rules.md#delegated-credentials). */
export const PAYMENTS_AUDIENCE = 'payments';
/** Scope a delegated token needs to create a refund. */
export const REFUND_SCOPE = 'refund:create';
/** Scope a delegated token needs to reverse a refund (a compensation, never an agent tool). */
export const REVERSE_SCOPE = 'refund:reverse';

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING=1` removes the ledger's
 * own ceiling check (control-removed test: a wrong policy upstream then pays above the ceiling).
 * Asked per request; the process's switches are read once (`testFaults` of the contracts).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
export function ceilingCheckRemoved(env: Record<string, string | undefined> = process.env): boolean {
  return testFaults(env).disableDownstreamCeiling;
}

/** Largest amount a refund row can hold (Postgres `integer`), cents. */
const MAX_AMOUNT_CENTS = 2_147_483_647;

/** Body of `POST /ledger/refunds`: amount in integer cents (> 0), reason ≤ 240 chars (docs/product/users-and-tools.md#support-pack). */
export const RefundBodySchema = z
  .object({
    orderId: z.string().min(1).max(64),
    amountCents: z.number().int().positive().max(MAX_AMOUNT_CENTS),
    reason: z.string().max(240),
  })
  .strict();

const ListQuerySchema = z.object({
  orderId: z.string().min(1).max(64).optional(),
  tenant: z.string().min(1).max(64).optional(),
  ...PageQuery,
});

/** Body of `POST /ledger/refunds/:refundId/reversals`: why, ≤ 240 chars. */
export const ReversalBodySchema = z.object({ reason: z.string().max(240) }).strict();

/**
 * The payments ledger:
 * - `POST /ledger/refunds` (headers `Authorization: Bearer`, `Idempotency-Key`, optional
 *   `X-Fencing-Token`) → 201 `{refundId, orderId, amountCents, idempotencyKey, createdAt}`;
 *   200 with `Idempotent-Replayed: true` for a replay; 400 invalid body / missing key; 401 no or
 *   invalid token; 403 wrong audience/scope/epoch, `tenant_mismatch`, `ceiling_exceeded`;
 *   404 `order_not_found`; 409 `idempotency_key_reuse`, `stale_fencing_token`.
 * - `GET /ledger/refunds?orderId=…` → `{refunds: [...]}` (read-back, no token); without
 *   `orderId`, every refund (optionally `?tenant=…`), for reconciliation (docs/product/reconciliation.md),
 *   or one page of them by refund id with `?limit=1..1000[&after=<refundId>]` → `{refunds, next}`
 *   (`next`: the cursor of the following page, null on the last).
 * - `POST /ledger/refunds/:refundId/reversals` (Bearer token with scope `refund:reverse`,
 *   `Idempotency-Key`, optional `X-Fencing-Token`, body `{reason}`) → 201 `{reversalId, refundId,
 *   orderId, amountCents, idempotencyKey, createdAt}` reversing the whole refund; 200 with
 *   `Idempotent-Replayed: true` for a replay; 400; 401; 403 (delegation, `tenant_mismatch`); 404
 *   `refund_not_found`; 409 `already_reversed`, `idempotency_key_reuse`, `stale_fencing_token`.
 * - `GET /ledger/reversals[?orderId=…]` → `{reversals: [...]}` (read-back, no token); paged like
 *   refunds with `?limit=…[&after=<reversalId>]` → `{reversals, next}`.
 * Every effect POST verifies its delegated token and its binding to the request first
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): 403 `op_mismatch`,
 * `target_mismatch`, `fence_mismatch`, `token_replayed`; 409 `stale_fencing_token`; 503
 * `epoch_unavailable` — each before any effect; and writes its effect under the epoch fence
 * (ADR 0685): 403 `revoked_epoch` when an epoch bump committed since the token was verified.
 */
export function paymentsRouter(
  deps: EffectRouteDeps & {
    db: StagingDb;
    delegation: DelegationVerifier;
    orders: OrdersRepository;
    refunds: RefundsRepository;
    reversals: ReversalsRepository;
  },
): Router {
  const router = Router();

  router.post(
    '/ledger/refunds',
    effectRoute(deps, 'payments', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: PAYMENTS_AUDIENCE, scope: REFUND_SCOPE });
      const idempotencyKey = requireIdempotencyKey(req);
      const headerFence = readFencingToken(req);
      const body = parseBody(RefundBodySchema, req.body);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey,
        target: { orderId: body.orderId, amountCents: body.amountCents },
        headerFence,
      });
      const { refund, replayed } = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const order = await orderOfTenant(deps.orders, claims, body.orderId, trx);
          // The ledger bounds the refund by the user's delegation itself, so a wrong policy upstream
          // is still bounded (docs/product/policy-rules.md#delegated-credentials, invariants.md#authority).
          if (body.amountCents > claims.ceiling && !ceilingCheckRemoved()) {
            throw new Forbidden('ceiling_exceeded', `amount ${body.amountCents} exceeds the delegated ceiling ${claims.ceiling} (cents)`);
          }
          return deps.refunds.create(trx, {
            idempotencyKey,
            orderId: order.id,
            tenant: order.tenant,
            amountCents: body.amountCents,
            reason: body.reason,
            requester: claims.sub,
            actor: claims.act.sub,
            fencingToken: binding.fencingToken,
          });
        },
        binding.spend,
      );
      const result = {
        refundId: refund.refundId,
        orderId: refund.orderId,
        amountCents: refund.amountCents,
        idempotencyKey: refund.idempotencyKey,
        createdAt: refund.createdAt,
      };
      return replayed
        ? { status: 200, body: result, headers: { 'Idempotent-Replayed': 'true' }, reason: 'idempotent_replay' }
        : { status: 201, body: result };
    }),
  );

  router.get('/ledger/refunds', async (req, res) => {
    const q = parseQuery(ListQuerySchema, req.query);
    const page = pageOf(q);
    if (q.orderId !== undefined) return void res.json({ refunds: await deps.refunds.listByOrder(q.orderId) });
    const refunds = await deps.refunds.listAll(q.tenant, page);
    res.json(listingBody('refunds', refunds, page, (r) => r.refundId));
  });

  router.post(
    '/ledger/refunds/:refundId/reversals',
    effectRoute(deps, 'payments', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: PAYMENTS_AUDIENCE, scope: REVERSE_SCOPE });
      const idempotencyKey = requireIdempotencyKey(req);
      const headerFence = readFencingToken(req);
      const body = parseBody(ReversalBodySchema, req.body);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey,
        target: { refundId: String(req.params.refundId) },
        headerFence,
      });
      const { reversal, replayed } = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const refund = await deps.refunds.find(String(req.params.refundId), trx);
          if (!refund) throw new NotFound('refund_not_found', `no refund ${String(req.params.refundId)}`);
          assertSameTenant(claims, refund.tenant);
          return deps.reversals.reverse(trx, {
            refundId: refund.refundId,
            idempotencyKey,
            reason: body.reason,
            requester: claims.sub,
            actor: claims.act.sub,
            fencingToken: binding.fencingToken,
          });
        },
        binding.spend,
      );
      const result = {
        reversalId: reversal.reversalId,
        refundId: reversal.refundId,
        orderId: reversal.orderId,
        amountCents: reversal.amountCents,
        idempotencyKey: reversal.idempotencyKey,
        createdAt: reversal.createdAt,
      };
      return replayed
        ? { status: 200, body: result, headers: { 'Idempotent-Replayed': 'true' }, reason: 'idempotent_replay' }
        : { status: 201, body: result };
    }),
  );

  router.get('/ledger/reversals', async (req, res) => {
    const q = parseQuery(ListQuerySchema, req.query);
    const page = pageOf(q);
    const reversals = await deps.reversals.list(q.orderId, page);
    res.json(listingBody('reversals', reversals, page, (v) => v.reversalId));
  });

  return router;
}
