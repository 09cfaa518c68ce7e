import { randomBytes } from 'node:crypto';
import type { StagingDb } from '../db/staging.database.ts';

/** A shipment of an order; `createdAt` ISO 8601. */
export interface Shipment {
  shipmentId: string;
  orderId: string;
  createdAt: string;
}

/**
 * `staging.shipments`. The order system has no idempotency key (SPEC §2 `reship_order`): every
 * create call makes a new shipment, and the list is the read-back the executor compares
 * against its baseline.
 */
export class ShipmentsRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** Creates a new shipment, unconditionally. */
  async create(input: { orderId: string; tenant: string; requester: string; actor: string }): Promise<Shipment> {
    const row = await this.db
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

  /** Shipments of an order, oldest first. */
  async listByOrder(orderId: string): Promise<Shipment[]> {
    const rows = await this.db
      .selectFrom('staging.shipments')
      .select(['shipment_id', 'order_id', 'created_at'])
      .where('order_id', '=', orderId)
      .orderBy('created_at', 'asc')
      .orderBy('shipment_id', 'asc')
      .execute();
    return rows.map((r) => ({ shipmentId: r.shipment_id, orderId: r.order_id, createdAt: r.created_at.toISOString() }));
  }
}
