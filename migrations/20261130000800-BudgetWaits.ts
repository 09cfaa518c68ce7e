import { sql, type Kysely } from 'kysely';

/**
 * Waiting is not working time (docs/product/invariants.md#bounds, ADR 0015): `paused_at` is when a tool switch-off held
 * the run (cleared when it resumes), and `wait_credited_until` is how far waits — approvals and
 * pauses — have been credited to the deadline already, so overlapping waits are credited once.
 * Backward compatible: nullable columns.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE budgets ADD COLUMN paused_at timestamptz, ADD COLUMN wait_credited_until timestamptz`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE budgets DROP COLUMN paused_at, DROP COLUMN wait_credited_until`.execute(db);
}
