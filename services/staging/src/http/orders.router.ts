import { Router } from 'express';
import { ConflictError, UserError } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { OrdersRepository } from '../repositories/orders.repository.ts';
import type { ShipmentsRepository } from '../repositories/shipments.repository.ts';
import { assertSameTenant, requireDelegation } from './delegation.guard.ts';
import { effectRoute, type EffectRouteDeps } from './effect.route.ts';

/** Delegation audience of the order system (SPEC §3). */
export const ORDERS_AUDIENCE = 'orders';
/** Scope a delegated token needs to create a shipment. */
export const RESHIP_SCOPE = 'reship:create';

/**
 * The order system (no idempotency key, by design: SPEC §2 `reship_order`):
 * - `GET /orders/:id` → `{id, tenant, region, customer, paid (cents), status}`; 404 `order_not_found`.
 * - `GET /orders/:id/shipments` → `{shipments: [{shipmentId, orderId, createdAt}]}` (read-back).
 * - `POST /orders/:id/shipments` (Bearer token) → 201 `{shipmentId, orderId, createdAt}`, a new
 *   shipment on every call; 401 no or invalid token; 403 wrong audience/scope/epoch or
 *   `tenant_mismatch`; 404 `order_not_found`; 409 `order_not_shipped`.
 */
export function ordersRouter(
  deps: EffectRouteDeps & {
    db: StagingDb;
    delegationSecret: string;
    orders: OrdersRepository;
    shipments: ShipmentsRepository;
  },
): Router {
  const router = Router();

  router.get('/orders/:id', async (req, res) => {
    const order = await deps.orders.find(req.params.id);
    if (!order) throw new UserError('order_not_found', `no order ${req.params.id}`, { status: 404 });
    res.json(order);
  });

  router.get('/orders/:id/shipments', async (req, res) => {
    res.json({ shipments: await deps.shipments.listByOrder(req.params.id) });
  });

  router.post(
    '/orders/:id/shipments',
    effectRoute(deps, 'orders', async (req) => {
      const claims = await requireDelegation(req, deps.db, {
        secret: deps.delegationSecret,
        audience: ORDERS_AUDIENCE,
        scope: RESHIP_SCOPE,
      });
      const id = String(req.params.id);
      const order = await deps.orders.find(id);
      if (!order) throw new UserError('order_not_found', `no order ${id}`, { status: 404 });
      assertSameTenant(claims, order.tenant);
      if (order.status !== 'shipped') {
        throw new ConflictError('order_not_shipped', `order ${order.id} is ${order.status}, not shipped`);
      }
      const shipment = await deps.shipments.create({
        orderId: order.id,
        tenant: order.tenant,
        requester: claims.sub,
        actor: claims.act.sub,
      });
      return { status: 201, body: shipment };
    }),
  );

  return router;
}
