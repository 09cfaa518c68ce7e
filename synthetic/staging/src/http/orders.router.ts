import { Router } from 'express';
import { z } from 'zod';
import { ConflictError, NotFound } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { OrdersRepository } from '../repositories/orders.repository.ts';
import type { ShipmentsRepository } from '../repositories/shipments.repository.ts';
import {
  orderOfTenant,
  bindDelegation,
  readFencingToken,
  requireDelegation,
  requireIdempotencyKey,
  type DelegationVerifier,
  withEpochFence,
} from './delegation.guard.ts';
import { effectRoute, type EffectRouteDeps } from './effect.route.ts';
import { listingBody, PageQuery, pageOf, parseQuery, SinceQuery } from './query.parser.ts';

/** `GET /shipments`: the window's start, and optionally a page. */
const WindowQuerySchema = z.object({ since: SinceQuery, ...PageQuery });

/** Delegation audience of the order system (docs/product/policy-rules.md#delegated-credentials). */
export const ORDERS_AUDIENCE = 'orders';
/** Scope a delegated token needs to create a shipment. */
export const RESHIP_SCOPE = 'reship:create';
/** Scope a delegated token needs to cancel a shipment (a compensation, never an agent tool). */
export const CANCEL_SHIPMENT_SCOPE = 'shipment:cancel';

/**
 * The order system (no idempotency key, by design: docs/product/users-and-tools.md#support-pack, `reship_order`):
 * - `GET /orders/:id` → `{id, tenant, region, customer, paid (cents), status}`; 404 `order_not_found`.
 * - `GET /orders/:id/shipments` → `{shipments: [{shipmentId, orderId, createdAt, cancelledAt}]}`
 *   (read-back; cancelled shipments stay listed with `cancelledAt` set).
 * - `GET /shipments?since=<ISO 8601>` → `{shipments: [{shipmentId, orderId, tenant, createdAt,
 *   cancelledAt}]}`: every shipment created at or after `since`, of any order (read-back by time
 *   window, ADR 0791); one page by shipment id with `?limit=1..1000[&after=<shipmentId>]` →
 *   `{shipments, next}`; 400 `invalid_query` without a readable `since`.
 * - `POST /orders/:id/shipments` (Bearer token) → 201 `{shipmentId, orderId, createdAt}`, a new
 *   shipment on every call; 401 no or invalid token; 403 wrong audience/scope/epoch or
 *   `tenant_mismatch`; 404 `order_not_found`; 409 `order_not_shipped`.
 * - `POST /orders/:id/shipments/:shipmentId/cancel` (Bearer token with scope `shipment:cancel`,
 *   `Idempotency-Key`, optional `X-Fencing-Token`) → 201 `{shipmentId, orderId, createdAt,
 *   cancelledAt}`; 200 with `Idempotent-Replayed: true` for a replay; 400; 401; 403; 404
 *   `order_not_found`, `shipment_not_found`; 409 `already_cancelled`, `idempotency_key_reuse`,
 *   `stale_fencing_token`.
 * Every effect POST verifies its delegated token and its binding to the request first
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): 403 `op_mismatch`,
 * `target_mismatch`, `fence_mismatch`, `token_replayed`; 409 `stale_fencing_token`; 503
 * `epoch_unavailable` — each before any effect; and writes its effect under the epoch fence
 * (ADR 0685): 403 `revoked_epoch` when an epoch bump committed since the token was verified.
 */
export function ordersRouter(
  deps: EffectRouteDeps & {
    db: StagingDb;
    delegation: DelegationVerifier;
    orders: OrdersRepository;
    shipments: ShipmentsRepository;
  },
): Router {
  const router = Router();

  router.get('/orders/:id', async (req, res) => {
    const order = await deps.orders.find(req.params.id);
    if (!order) throw new NotFound('order_not_found', `no order ${req.params.id}`);
    res.json(order);
  });

  router.get('/orders/:id/shipments', async (req, res) => {
    res.json({ shipments: await deps.shipments.listByOrder(req.params.id) });
  });

  router.get('/shipments', async (req, res) => {
    const q = parseQuery(WindowQuerySchema, req.query);
    const page = pageOf(q);
    const rows = await deps.shipments.listSince(new Date(q.since), page);
    res.json(listingBody('shipments', rows, page, (r) => r.shipmentId));
  });

  router.post(
    '/orders/:id/shipments',
    effectRoute(deps, 'orders', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: ORDERS_AUDIENCE, scope: RESHIP_SCOPE });
      const id = String(req.params.id);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey: null,
        target: { orderId: id },
        headerFence: readFencingToken(req),
      });
      const shipment = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const order = await orderOfTenant(deps.orders, claims, id, trx);
          if (order.status !== 'shipped') {
            throw new ConflictError('order_not_shipped', `order ${order.id} is ${order.status}, not shipped`);
          }
          return deps.shipments.create(trx, {
            orderId: order.id,
            tenant: order.tenant,
            requester: claims.sub,
            actor: claims.act.sub,
          });
        },
        binding.spend,
      );
      return { status: 201, body: shipment };
    }),
  );

  router.post(
    '/orders/:id/shipments/:shipmentId/cancel',
    effectRoute(deps, 'orders', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: ORDERS_AUDIENCE, scope: CANCEL_SHIPMENT_SCOPE });
      const idempotencyKey = requireIdempotencyKey(req);
      const id = String(req.params.id);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey,
        target: { orderId: id, shipmentId: String(req.params.shipmentId) },
        headerFence: readFencingToken(req),
      });
      const { shipment, replayed } = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const order = await orderOfTenant(deps.orders, claims, id, trx);
          return deps.shipments.cancel(trx, {
            orderId: order.id,
            shipmentId: String(req.params.shipmentId),
            idempotencyKey,
            fencingToken: binding.fencingToken,
          });
        },
        binding.spend,
      );
      return replayed
        ? { status: 200, body: shipment, headers: { 'Idempotent-Replayed': 'true' }, reason: 'idempotent_replay' }
        : { status: 201, body: shipment };
    }),
  );

  return router;
}
