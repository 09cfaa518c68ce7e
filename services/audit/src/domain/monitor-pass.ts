import { testFaults } from '@gatehouse/contracts';
import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';

/** Share of the interval that must have passed since the last pass began before another may start (timer jitter). */
const SLACK = 0.9;

/**
 * Claims the invariant monitors' pass of this interval for `replica`
 * (docs/decisions/0400-one-monitor-pass-per-interval.md): one conditional upsert of the
 * `monitor_passes` row (written if missing) that holds only when the last pass started at least 0.9 × `intervalMs`
 * ago by the database's clock. With N audit replicas on the same interval, one of them runs
 * each pass (and raises its alerts) — whichever timer fires first — and when that replica stops,
 * another takes the next pass within one interval. Returns whether this replica may run the pass.
 * With `GATEHOUSE_TEST_EVERY_REPLICA_MONITORS=1` (tests only) every call may: the control removed.
 * @throws the database error when the row cannot be written (the caller skips this pass and logs it).
 */
export async function claimMonitorPass(db: Db, replica: string, intervalMs: number): Promise<boolean> {
  if (testFaults().everyReplicaMonitors) return true;
  // An upsert: a missing row (a restore without it) is written again rather than silencing the monitors.
  const claimed = await db
    .insertInto('monitor_passes')
    .values({ id: 1, started_at: sql`now()`, replica })
    .onConflict((oc) =>
      oc
        .column('id')
        .doUpdateSet({ started_at: sql`now()`, replica })
        .where('monitor_passes.started_at', '<=', sql<Date>`now() - make_interval(secs => ${(intervalMs * SLACK) / 1000})`),
    )
    .returning('id')
    .executeTakeFirst();
  return claimed !== undefined;
}
