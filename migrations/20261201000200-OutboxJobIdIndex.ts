import { sql, type Kysely } from 'kysely';

/**
 * The watchdog finds the outbox row of the job a live run waits for by its deterministic job id
 * (an equality, or a `<id>_resume%` prefix for a resumed step; docs/decisions/0100-transitions-and-watchdog.md):
 * an index on `job_id` with `text_pattern_ops` serves both, instead of a scan of the outbox per
 * run per pass. Backward compatible: an index only.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX outbox_job_id ON outbox (job_id text_pattern_ops)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX outbox_job_id`.execute(db);
}
