import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { Trx } from './db.ts';

/** A signed 64-bit advisory lock id for `key` (the first 8 bytes of its SHA-256), as a decimal string. */
export function advisoryLockId(key: string): string {
  return createHash('sha256').update(key).digest().readBigInt64BE(0).toString();
}

/**
 * The advisory lock ids of `keys` in the one order every transaction takes them: ascending as
 * signed 64-bit integers, so two transactions that share locks cannot deadlock on them. Decimal
 * strings ({@link advisoryLockId}).
 */
export function advisoryLockOrder(keys: readonly string[]): string[] {
  return keys.map(advisoryLockId).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
}

/**
 * Takes the transaction-scoped advisory locks of `keys` (names of what competes: a refund limit,
 * a tenant's webhook endpoints) in one statement, in {@link advisoryLockOrder}, so any two
 * transactions take shared locks in the same order and cannot deadlock on them. Held until the
 * transaction ends (docs/product/design.md#correctness-rules: contention only where the business competes).
 */
export async function takeAdvisoryLocks(trx: Trx, keys: readonly string[]): Promise<void> {
  if (!keys.length) return;
  const ids = advisoryLockOrder(keys);
  await sql`SELECT ${sql.join(ids.map((id) => sql`pg_advisory_xact_lock(${id}::bigint)`))}`.execute(trx);
}
