import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';

/** What our database's backends were doing while sampled (pg_stat_activity every 100 ms). */
export interface WaitProfile {
  samples: number;
  /** Mean number of backends not idle (running, or waiting on something). */
  activeMean: number;
  /**
   * Share (0–1) of active backend samples by what they waited on: `Lock:advisory` (the
   * refund-decision lock), `Lock:transactionid`/`tuple` (row locks), `LWLock:*`, `IO:*`,
   * `Client:ClientRead` (idle in transaction, waiting for the service's next statement), or
   * `running` (on CPU, no wait event). Top 6.
   */
  waits: Record<string, number>;
}

/**
 * Samples `pg_stat_activity` for `database` every 100 ms until `stop()` is called: the
 * Postgres side of "where the bottleneck sits" without any extension.
 */
export function sampleWaits(db: Db, database: string): { stop: () => Promise<WaitProfile> } {
  const counts = new Map<string, number>();
  let samples = 0;
  let active = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const r = await sql<{ w: string | null; state: string | null }>`
        SELECT CASE WHEN wait_event IS NULL THEN NULL ELSE wait_event_type || ':' || wait_event END AS w, state
        FROM pg_stat_activity WHERE datname = ${database} AND pid <> pg_backend_pid() AND state IS NOT NULL AND state <> 'idle'`.execute(
        db,
      );
      samples++;
      for (const row of r.rows) {
        const k = row.w ?? 'running';
        counts.set(k, (counts.get(k) ?? 0) + 1);
        active++;
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      const waits = Object.fromEntries(
        [...counts]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 6)
          .map(([k, n]) => [k, Math.round((n / Math.max(1, active)) * 100) / 100]),
      );
      return { samples, activeMean: Math.round((active / Math.max(1, samples)) * 10) / 10, waits };
    },
  };
}
