import { sql, type Kysely } from 'kysely';

/**
 * The containment monitor `effect_after_epoch_bump` (packages/ledger/src/containment.ts) reads the
 * epoch in force at each effect from the `epoch.bumped` events of the audit chain. Without an
 * index every monitor pass read and parsed every event of `audit_log`, a table that only grows: in
 * the benchmark's load it was the largest consumer of Postgres CPU that was not a service's own
 * statement. A partial index on the bumps (a handful of rows) serves that read. Backward
 * compatible: an index only. Like the earlier index migrations it is built inside the migration's
 * transaction, which blocks inserts into `audit_log` while it is built: on a long chain, build it
 * beforehand with `CREATE INDEX CONCURRENTLY audit_log_epoch_bumped …` (then this is a no-op).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX IF NOT EXISTS audit_log_epoch_bumped ON audit_log (seq) WHERE event->>'type' = 'epoch.bumped'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS audit_log_epoch_bumped`.execute(db);
}
