import type { StagingDb } from '../db/staging.database.ts';

/** An order of the order system. `paid` is integer cents. */
export interface Order {
  id: string;
  tenant: string;
  region: string;
  customer: string;
  paid: number;
  status: string;
}

/** `staging.orders` and `staging.customers` (seeded from world.json, read-only here). */
export class OrdersRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** The order with this id, or undefined; read through `db` (an effect's transaction: ADR 0786; default the pool). */
  async find(id: string, db: StagingDb = this.db): Promise<Order | undefined> {
    const row = await db.selectFrom('staging.orders').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) return undefined;
    return { id: row.id, tenant: row.tenant, region: row.region, customer: row.customer, paid: row.paid_cents, status: row.status };
  }

  /** Email address of a customer, or undefined when the customer is unknown; read through `db` (ADR 0786; default the pool). */
  async customerEmail(customerId: string, db: StagingDb = this.db): Promise<string | undefined> {
    const row = await db.selectFrom('staging.customers').select('email').where('id', '=', customerId).executeTakeFirst();
    return row?.email;
  }
}
