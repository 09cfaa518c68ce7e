import { sql, type Kysely } from 'kysely';

/**
 * Whether a run completed while consequential writes were off for its release
 * (docs/decisions/0724-canary-analysis-leaves-out-runs-whose-writes-were-withheld.md): an act-mode
 * run of a candidate before `enable-writes`, or of a release a rollback restored, was offered only
 * its read tools, so its completion is not evidence of what the release does with writes on.
 * The agent loop sets it when it completes such a run; the canary analysis leaves those runs out
 * of its quality measures and reports how many there were.
 * Backward compatible: a column with a default the former release neither reads nor writes
 * (its runs count as not withheld, as before). Runs completed before it are not back-filled.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE workflows ADD COLUMN IF NOT EXISTS writes_withheld boolean NOT NULL DEFAULT false`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE workflows DROP COLUMN IF EXISTS writes_withheld`.execute(db);
}
