import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';

/**
 * Waits until some backend of `db`'s database waits on a lock (`pg_stat_activity.wait_event_type
 * = 'Lock'`): the point at which a barrier test knows the transaction it started is blocked.
 * Polls every 10 ms for up to `timeoutMs` (default 5,000 ms). Returns whether one was seen.
 */
export function someoneWaitsOnALock(db: Db, timeoutMs = 5_000): Promise<boolean> {
  return lockWaiters(db, 1, timeoutMs);
}

/**
 * Waits until at least `n` backends of `db`'s database wait on a lock (as
 * {@link someoneWaitsOnALock}): the barrier of a test that queues `n` requests behind a lock it
 * holds before releasing them together. Polls every 10 ms for up to `timeoutMs` (default
 * 5,000 ms). Returns whether `n` were seen.
 */
export async function lockWaiters(db: Db, n: number, timeoutMs = 5_000): Promise<boolean> {
  for (const until = Date.now() + timeoutMs; Date.now() < until;) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
    if (rows[0]!.n >= n) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
}
