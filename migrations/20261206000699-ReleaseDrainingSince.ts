import { sql, type Kysely } from 'kysely';

/**
 * When on-call began draining each release (docs/decisions/0699-a-drain-is-on-call-s-wait.md):
 * `gatehouse queues drain` sets it with the `draining` mark, and whatever ends the hold (`queues
 * resume`, `queues requeue` of its runs, an activation or a rollback that restores the release)
 * credits the held runs' wall-time budgets for the time since, as for a tool on-call paused.
 * Backward compatible: a nullable column the former release neither reads nor writes. A release
 * draining when this runs gets the time of the migration (its drain's start is unknown; the wait
 * before is not credited).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE releases ADD COLUMN IF NOT EXISTS draining_since timestamptz`.execute(db);
  await sql`UPDATE releases SET draining_since = now() WHERE draining AND draining_since IS NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE releases DROP COLUMN IF EXISTS draining_since`.execute(db);
}
