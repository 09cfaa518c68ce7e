import { sql, type Kysely } from 'kysely';

/**
 * One row that says when the invariant monitors' last pass started and which audit replica ran
 * it (docs/decisions/0400-one-monitor-pass-per-interval.md). Each replica's timer claims the
 * pass with one conditional upsert, so N replicas run one pass per interval and send one alert
 * per violation per interval, not N. A new table only: a former release never reads it, and its
 * replicas keep running their own passes as before (backward compatible).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE monitor_passes (
      id smallint PRIMARY KEY CHECK (id = 1),
      started_at timestamptz NOT NULL,
      replica text
    )`.execute(db);
  await sql`INSERT INTO monitor_passes (id, started_at, replica) VALUES (1, 'epoch', NULL)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE monitor_passes`.execute(db);
}
