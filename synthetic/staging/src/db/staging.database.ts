import { Kysely, PostgresDialect, type ColumnType, type Generated } from 'kysely';
import type pg from 'pg';
import { createPool } from '@gatehouse/ledger';

/**
 * `timestamptz` column: read as `Date` (node-postgres parses it), written as `Date` or ISO text,
 * filled by the database default on insert.
 */
type CreatedAt = ColumnType<Date, Date | string | undefined, never>;

/**
 * `bigint` column: node-postgres reads int8 as a decimal string (no precision loss); callers
 * convert with `Number()` after checking the value is a safe integer.
 */
type Int8 = ColumnType<string, number | string, number | string>;

/** `staging.orders`: the order system's records, seeded from world.json. */
export interface OrdersTable {
  id: string;
  tenant: string;
  region: string;
  customer: string;
  /** Amount paid, integer cents. */
  paid_cents: number;
  status: string;
}

/** `staging.customers`: recipients for mail, seeded from world.json. */
export interface CustomersTable {
  id: string;
  email: string;
}

/** `staging.changes`: change records, seeded from world.json. */
export interface ChangesTable {
  id: string;
  tenant: string;
  environment: string;
  service: string;
  summary: string;
  risk: string;
}

/** `staging.refunds`: the payments ledger. `idempotency_key` is unique (the replay basis). */
export interface RefundsTable {
  refund_id: string;
  idempotency_key: string;
  order_id: string;
  tenant: string;
  /** Integer cents, > 0. */
  amount_cents: number;
  reason: string;
  requester: string;
  actor: string;
  fencing_token: Int8 | null;
  created_at: CreatedAt;
}

/** `staging.fencing_tokens`: highest fencing token seen per (target, key). */
export interface FencingTokensTable {
  target: string;
  idempotency_key: string;
  highest: Int8;
}

/** `staging.shipments`: one row per reship call (the order system has no idempotency key). */
export interface ShipmentsTable {
  shipment_id: string;
  order_id: string;
  tenant: string;
  requester: string;
  actor: string;
  created_at: CreatedAt;
  /** Set once by a `cancel_shipment` compensation; null while the shipment stands. */
  cancelled_at: ColumnType<Date | null, never, Date | string>;
  /** Idempotency key of the cancellation (unique). */
  cancel_key: ColumnType<string | null, never, string>;
}

/** `staging.refund_reversals`: `reverse_refund` compensations, one per refund, unique key. */
export interface RefundReversalsTable {
  reversal_id: string;
  refund_id: string;
  idempotency_key: string;
  order_id: string;
  tenant: string;
  /** Integer cents, > 0: the whole refund. */
  amount_cents: number;
  reason: string;
  requester: string;
  actor: string;
  fencing_token: Int8 | null;
  created_at: CreatedAt;
}

/** `staging.messages`: mail sent (no dedupe). */
export interface MessagesTable {
  message_id: string;
  order_id: string;
  tenant: string;
  template: string;
  recipient: string;
  requester: string;
  actor: string;
  created_at: CreatedAt;
}

/** `staging.change_operations`: scheduled changes; `operation_key` is the primary key. */
export interface ChangeOperationsTable {
  operation_key: string;
  plan_id: string;
  change_id: string;
  tenant: string;
  window: string;
  note: string | null;
  status: string;
  requester: string;
  actor: string;
  created_at: CreatedAt;
  /** When the change's window starts; null for a manual window not started yet. */
  window_starts_at: Date | null;
  /** Idempotency key of the cancel that cancelled it (unique); null while not cancelled. */
  cancel_key: string | null;
  cancel_reason: string | null;
  /** The delegated user (the approving change owner) of the cancel. */
  cancelled_by: string | null;
  cancelled_at: Date | null;
}

/** `staging.request_log`: every effect request, accepted or rejected. */
export interface RequestLogTable {
  id: Generated<Int8>;
  at: CreatedAt;
  target: string;
  method: string;
  path: string;
  order_id: string | null;
  idempotency_key: string | null;
  fencing_token: Int8 | null;
  /** HTTP status answered; null when no answer was sent (hang). */
  status: number | null;
  reason: string | null;
}

/** Kysely database type of the staging systems (schema-qualified table names). */
export interface StagingDatabase {
  'staging.orders': OrdersTable;
  'staging.customers': CustomersTable;
  'staging.changes': ChangesTable;
  'staging.refunds': RefundsTable;
  'staging.refund_reversals': RefundReversalsTable;
  'staging.fencing_tokens': FencingTokensTable;
  'staging.shipments': ShipmentsTable;
  'staging.messages': MessagesTable;
  'staging.change_operations': ChangeOperationsTable;
  'staging.request_log': RequestLogTable;
}

/** A Kysely instance over the staging schema. */
export type StagingDb = Kysely<StagingDatabase>;

/**
 * Opens a `pg` pool on `connectionString` (at most `maxConnections`) and a Kysely instance over
 * it. The caller owns both: `await db.destroy()` ends the pool. A client that loses its
 * connection (Postgres restart, a terminated backend), idle or checked out, fails its statement
 * and is reported to `onConnectionError` instead of crashing the process (the ledger's
 * `createPool`); the pool replaces it on the next checkout.
 */
export function openStagingDatabase(
  connectionString: string,
  opts: { maxConnections?: number; onConnectionError?: (err: Error) => void } = {},
): { db: StagingDb; pool: pg.Pool } {
  const pool = createPool(connectionString, opts.maxConnections ?? 10, opts.onConnectionError);
  const db = new Kysely<StagingDatabase>({ dialect: new PostgresDialect({ pool }) });
  return { db, pool };
}
