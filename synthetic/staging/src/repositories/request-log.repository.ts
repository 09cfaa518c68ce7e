import type { StagingDb } from '../db/staging.database.ts';

/** One effect request as recorded, accepted or rejected. */
export interface RequestLogEntry {
  target: string;
  method: string;
  path: string;
  orderId: string | null;
  idempotencyKey: string | null;
  fencingToken: number | null;
  /** HTTP status answered; null when none was sent (the `hang` fault). */
  status: number | null;
  /** Machine reason (error reason, `idempotent_replay`, `fault:<mode>`), null on plain success. */
  reason: string | null;
}

/** A recorded request with its id and time (ISO 8601). */
export interface RecordedRequest extends RequestLogEntry {
  id: number;
  at: string;
}

/** Longest text stored per column: the log is evidence, not a sink for arbitrary input. */
const MAX_TEXT = 256;
const clip = (s: string | null): string | null => (s === null ? null : s.slice(0, MAX_TEXT));

/**
 * `staging.request_log`: every effect request the staging systems received, so tests can
 * assert "zero downstream calls" (docs/product/hard-cases.md#another-tenants-order: denied before any downstream call).
 */
export class RequestLogRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** Appends one entry (its own statement, outside any effect transaction). */
  async record(entry: RequestLogEntry): Promise<void> {
    await this.db
      .insertInto('staging.request_log')
      .values({
        target: entry.target,
        method: entry.method,
        path: clip(entry.path) ?? '',
        order_id: clip(entry.orderId),
        idempotency_key: clip(entry.idempotencyKey),
        fencing_token: entry.fencingToken,
        status: entry.status,
        reason: clip(entry.reason),
      })
      .execute();
  }

  /** Entries matching the optional filters, oldest first (at most `limit`, default 1000). */
  async list(filter: { orderId?: string; target?: string }, limit = 1000): Promise<RecordedRequest[]> {
    let q = this.db.selectFrom('staging.request_log').selectAll();
    if (filter.orderId !== undefined) q = q.where('order_id', '=', filter.orderId);
    if (filter.target !== undefined) q = q.where('target', '=', filter.target);
    const rows = await q.orderBy('id', 'asc').limit(limit).execute();
    return rows.map((r) => ({
      id: Number(r.id),
      at: r.at.toISOString(),
      target: r.target,
      method: r.method,
      path: r.path,
      orderId: r.order_id,
      idempotencyKey: r.idempotency_key,
      fencingToken: r.fencing_token === null ? null : Number(r.fencing_token),
      status: r.status,
      reason: r.reason,
    }));
  }

  /** Deletes every entry (tests only); returns how many were removed. */
  async clear(): Promise<number> {
    const r = await this.db.deleteFrom('staging.request_log').executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
