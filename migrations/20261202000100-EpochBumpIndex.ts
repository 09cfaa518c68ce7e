import { sql, type Kysely } from 'kysely';

/**
 * The containment monitor `effect_after_epoch_bump` (packages/ledger/src/containment.ts) reads the
 * epoch in force at each effect from the `epoch.bumped` events of the audit chain. Without an
 * index every monitor pass read and parsed every event of `audit_log`, a table that only grows: in
 * the benchmark's load it was the largest consumer of Postgres CPU that was not a service's own
 * statement. A partial index on the bumps (a handful of rows) serves that read. Backward
 * compatible: an index only.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX audit_log_epoch_bumped ON audit_log (seq) WHERE event->>'type' = 'epoch.bumped'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX audit_log_epoch_bumped`.execute(db);
}
