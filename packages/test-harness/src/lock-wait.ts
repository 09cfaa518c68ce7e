import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';

/**
 * Waits until some backend of `db`'s database waits on a lock (`pg_stat_activity.wait_event_type
 * = 'Lock'`): the point at which a barrier test knows the transaction it started is blocked.
 * Polls every 10 ms for up to `timeoutMs` (default 5,000 ms). Returns whether one was seen.
 */
export async function someoneWaitsOnALock(db: Db, timeoutMs = 5_000): Promise<boolean> {
  for (const until = Date.now() + timeoutMs; Date.now() < until;) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
    if (rows[0]!.n > 0) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
}
