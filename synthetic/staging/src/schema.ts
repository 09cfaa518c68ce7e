import { sql } from 'kysely';
import { loadWorld, type World } from '@gatehouse/contracts';
import type { StagingDb } from './db/staging.database.ts';
import { ensureTokenBindingSchema } from './http/token-binding.ts';

/** Key of the advisory lock that serialises concurrent schema set-up (two processes booting). */
const SCHEMA_LOCK_KEY = 'gatehouse.staging.schema';

/**
 * Creates the `staging` schema and its tables if missing, then seeds orders, customers and
 * changes from the synthetic world (`world.json`, docs/product/design.md#synthetic-environment) with
 * `ON CONFLICT DO NOTHING`, so it is idempotent and never overwrites state kept across restarts.
 * Runs in one transaction under an advisory lock, so concurrent boots do not race on DDL.
 * @param world defaults to {@link loadWorld}().
 * @throws the database error when Postgres is unreachable or refuses the DDL.
 */
export async function ensureStagingSchema(db: StagingDb, world: World = loadWorld()): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`SELECT pg_advisory_xact_lock(hashtext(${SCHEMA_LOCK_KEY}))`.execute(trx);
    await sql`CREATE SCHEMA IF NOT EXISTS staging`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.orders (
      id text PRIMARY KEY,
      tenant text NOT NULL,
      region text NOT NULL,
      customer text NOT NULL,
      paid_cents integer NOT NULL CHECK (paid_cents >= 0),
      status text NOT NULL
    )`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.customers (
      id text PRIMARY KEY,
      email text NOT NULL
    )`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.changes (
      id text PRIMARY KEY,
      tenant text NOT NULL,
      environment text NOT NULL,
      service text NOT NULL,
      summary text NOT NULL,
      risk text NOT NULL
    )`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.refunds (
      refund_id text PRIMARY KEY,
      idempotency_key text NOT NULL,
      order_id text NOT NULL,
      tenant text NOT NULL,
      amount_cents integer NOT NULL CHECK (amount_cents > 0),
      reason text NOT NULL,
      requester text NOT NULL,
      actor text NOT NULL,
      fencing_token bigint,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(trx);
    // Uniqueness lives in the database (docs/product/design.md#uniqueness-in-the-database): the replay basis.
    await sql`CREATE UNIQUE INDEX IF NOT EXISTS refunds_idempotency_key_uq
      ON staging.refunds (idempotency_key)`.execute(trx);
    await sql`CREATE INDEX IF NOT EXISTS refunds_order_idx ON staging.refunds (order_id, created_at)`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.fencing_tokens (
      target text NOT NULL,
      idempotency_key text NOT NULL,
      highest bigint NOT NULL,
      PRIMARY KEY (target, idempotency_key)
    )`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.shipments (
      shipment_id text PRIMARY KEY,
      order_id text NOT NULL,
      tenant text NOT NULL,
      requester text NOT NULL,
      actor text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(trx);
    await sql`CREATE INDEX IF NOT EXISTS shipments_order_idx ON staging.shipments (order_id, created_at)`.execute(trx);
    // The time-windowed read-back (ADR 0791) of shipments and messages of any order.
    await sql`CREATE INDEX IF NOT EXISTS shipments_created_idx ON staging.shipments (created_at)`.execute(trx);
    // Compensation (docs/product/invariants.md#containment): a shipment cancelled once, idempotent by its key.
    await sql`ALTER TABLE staging.shipments ADD COLUMN IF NOT EXISTS cancelled_at timestamptz`.execute(trx);
    await sql`ALTER TABLE staging.shipments ADD COLUMN IF NOT EXISTS cancel_key text`.execute(trx);
    await sql`CREATE UNIQUE INDEX IF NOT EXISTS shipments_cancel_key_uq ON staging.shipments (cancel_key)`.execute(trx);
    // Compensation of a refund: at most one reversal per refund, idempotent by its key.
    await sql`CREATE TABLE IF NOT EXISTS staging.refund_reversals (
      reversal_id text PRIMARY KEY,
      refund_id text NOT NULL UNIQUE,
      idempotency_key text NOT NULL UNIQUE,
      order_id text NOT NULL,
      tenant text NOT NULL,
      amount_cents integer NOT NULL CHECK (amount_cents > 0),
      reason text NOT NULL,
      requester text NOT NULL,
      actor text NOT NULL,
      fencing_token bigint,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.messages (
      message_id text PRIMARY KEY,
      order_id text NOT NULL,
      tenant text NOT NULL,
      template text NOT NULL,
      recipient text NOT NULL,
      requester text NOT NULL,
      actor text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(trx);
    await sql`CREATE INDEX IF NOT EXISTS messages_order_idx ON staging.messages (order_id, created_at)`.execute(trx);
    await sql`CREATE INDEX IF NOT EXISTS messages_created_idx ON staging.messages (created_at)`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.change_operations (
      operation_key text PRIMARY KEY,
      plan_id text NOT NULL,
      change_id text NOT NULL,
      tenant text NOT NULL,
      "window" text NOT NULL,
      note text,
      status text NOT NULL,
      requester text NOT NULL,
      actor text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(trx);
    // Cancel-before-start (docs/decisions/0280-cancel-a-scheduled-change.md): when the window
    // starts (null: a manual window nobody started yet) and the cancel, idempotent by its key.
    await sql`ALTER TABLE staging.change_operations
      ADD COLUMN IF NOT EXISTS window_starts_at timestamptz,
      ADD COLUMN IF NOT EXISTS cancel_key text UNIQUE,
      ADD COLUMN IF NOT EXISTS cancel_reason text,
      ADD COLUMN IF NOT EXISTS cancelled_by text,
      ADD COLUMN IF NOT EXISTS cancelled_at timestamptz`.execute(trx);
    await sql`CREATE TABLE IF NOT EXISTS staging.request_log (
      id bigserial PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      target text NOT NULL,
      method text NOT NULL,
      path text NOT NULL,
      order_id text,
      idempotency_key text,
      fencing_token bigint,
      status integer,
      reason text
    )`.execute(trx);
    await sql`CREATE INDEX IF NOT EXISTS request_log_order_idx ON staging.request_log (order_id, id)`.execute(trx);
    await ensureTokenBindingSchema(trx);

    if (world.orders.length) {
      await trx
        .insertInto('staging.orders')
        .values(
          world.orders.map((o) => ({
            id: o.id,
            tenant: o.tenant,
            region: o.region,
            customer: o.customer,
            paid_cents: o.paid,
            status: o.status,
          })),
        )
        .onConflict((oc) => oc.column('id').doNothing())
        .execute();
    }
    if (world.customers.length) {
      await trx
        .insertInto('staging.customers')
        .values(world.customers.map((c) => ({ id: c.id, email: c.email })))
        .onConflict((oc) => oc.column('id').doNothing())
        .execute();
    }
    if (world.changes.length) {
      await trx
        .insertInto('staging.changes')
        .values(
          world.changes.map((c) => ({
            id: c.id,
            tenant: c.tenant,
            environment: c.environment,
            service: c.service,
            summary: c.summary,
            risk: c.risk,
          })),
        )
        .onConflict((oc) => oc.column('id').doNothing())
        .execute();
    }
  });
}
