import { randomBytes } from 'node:crypto';
import { ConflictError, NotFound } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';
import { observeFencingToken } from './fencing.repository.ts';
import type { ListPage } from './list-page.ts';

/** A shipment of an order; `createdAt` ISO 8601. */
export interface Shipment {
  shipmentId: string;
  orderId: string;
  createdAt: string;
}

/** A listed shipment: `cancelledAt` (ISO 8601) once a `cancel_shipment` compensation ran, else null. */
export interface ListedShipment extends Shipment {
  cancelledAt: string | null;
}

/** A shipment of a read-back window, with the tenant of its order as the order system recorded it. */
export interface WindowShipment extends ListedShipment {
  tenant: string;
}

/** Fencing namespace of cancellations in `staging.fencing_tokens`. */
const CANCEL_FENCE_TARGET = 'orders-cancel';

/**
 * `staging.shipments`. The order system has no idempotency key (docs/product/users-and-tools.md#support-pack, `reship_order`): every
 * create call makes a new shipment, and the list is the read-back the executor compares
 * against its baseline.
 */
export class ShipmentsRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** Creates a new shipment, unconditionally, in `trx` (the epoch fence's transaction, ADR 0685). */
  async create(trx: FencedTrx, input: { orderId: string; tenant: string; requester: string; actor: string }): Promise<Shipment> {
    const row = await trx
      .insertInto('staging.shipments')
      .values({
        shipment_id: `shp_${randomBytes(12).toString('hex')}`,
        order_id: input.orderId,
        tenant: input.tenant,
        requester: input.requester,
        actor: input.actor,
      })
      .returning(['shipment_id', 'order_id', 'created_at'])
      .executeTakeFirstOrThrow();
    return { shipmentId: row.shipment_id, orderId: row.order_id, createdAt: row.created_at.toISOString() };
  }

  /** Shipments of an order, oldest first, cancelled ones included (with `cancelledAt`). */
  async listByOrder(orderId: string): Promise<ListedShipment[]> {
    const rows = await this.db
      .selectFrom('staging.shipments')
      .select(['shipment_id', 'order_id', 'created_at', 'cancelled_at'])
      .where('order_id', '=', orderId)
      .orderBy('created_at', 'asc')
      .orderBy('shipment_id', 'asc')
      .execute();
    return rows.map((r) => ({
      shipmentId: r.shipment_id,
      orderId: r.order_id,
      createdAt: r.created_at.toISOString(),
      cancelledAt: r.cancelled_at ? r.cancelled_at.toISOString() : null,
    }));
  }

  /**
   * Shipments created at or after `since`, of any order (known to the order system or not),
   * cancelled ones included: the time-windowed read-back that finds a shipment no order list
   * names (docs/decisions/0791-reconciliation-reads-shipments-and-mail-by-time-window.md). With
   * `page`: by shipment id after the cursor, at most `page.limit` rows; without, the whole window,
   * oldest first.
   */
  async listSince(since: Date, page?: ListPage): Promise<WindowShipment[]> {
    let q = this.db
      .selectFrom('staging.shipments')
      .select(['shipment_id', 'order_id', 'tenant', 'created_at', 'cancelled_at'])
      .where('created_at', '>=', since);
    if (page) {
      if (page.after !== undefined) q = q.where('shipment_id', '>', page.after);
      q = q.orderBy('shipment_id', 'asc').limit(page.limit);
    } else q = q.orderBy('created_at', 'asc').orderBy('shipment_id', 'asc');
    return (await q.execute()).map((r) => ({
      shipmentId: r.shipment_id,
      orderId: r.order_id,
      tenant: r.tenant,
      createdAt: r.created_at.toISOString(),
      cancelledAt: r.cancelled_at ? r.cancelled_at.toISOString() : null,
    }));
  }

  /**
   * Cancels one shipment of an order (the `cancel_shipment` compensation), idempotent by key:
   * the first request cancels it, a repeat with the same key replays, in `trx` (the epoch fence's
   * transaction, ADR 0685) with the shipment row locked.
   * @throws NotFound(`shipment_not_found`, 404) when the order has no such shipment.
   * @throws ConflictError(`stale_fencing_token`) when the fencing token is below the highest seen.
   * @throws ConflictError(`already_cancelled`) when another key cancelled it.
   * @throws ConflictError(`idempotency_key_reuse`) when the key cancelled another shipment.
   */
  async cancel(
    trx: FencedTrx,
    req: {
      orderId: string;
      shipmentId: string;
      idempotencyKey: string;
      fencingToken: number | null;
    },
  ): Promise<{ shipment: ListedShipment; replayed: boolean }> {
    if (req.fencingToken !== null) await observeFencingToken(trx, CANCEL_FENCE_TARGET, req.idempotencyKey, req.fencingToken);
    const row = await trx
      .selectFrom('staging.shipments')
      .selectAll()
      .where('shipment_id', '=', req.shipmentId)
      .where('order_id', '=', req.orderId)
      .forUpdate()
      .executeTakeFirst();
    if (!row) throw new NotFound('shipment_not_found', `order ${req.orderId} has no shipment ${req.shipmentId}`);
    const view = (cancelledAt: Date): ListedShipment => ({
      shipmentId: row.shipment_id,
      orderId: row.order_id,
      createdAt: row.created_at.toISOString(),
      cancelledAt: cancelledAt.toISOString(),
    });
    if (row.cancel_key === req.idempotencyKey && row.cancelled_at) return { shipment: view(row.cancelled_at), replayed: true };
    if (row.cancelled_at)
      throw new ConflictError('already_cancelled', `shipment ${req.shipmentId} was already cancelled under another key`);
    const other = await trx
      .selectFrom('staging.shipments')
      .select('shipment_id')
      .where('cancel_key', '=', req.idempotencyKey)
      .executeTakeFirst();
    if (other) throw new ConflictError('idempotency_key_reuse', 'this idempotency key cancelled another shipment');
    const done = await trx
      .updateTable('staging.shipments')
      .set({ cancelled_at: new Date(), cancel_key: req.idempotencyKey })
      .where('shipment_id', '=', row.shipment_id)
      .returning('cancelled_at')
      .executeTakeFirstOrThrow();
    return { shipment: view(done.cancelled_at ?? new Date()), replayed: false };
  }
}
