import { sql, type Kysely } from 'kysely';

/**
 * The revocation epoch the operation's delegated token carried, set with the write-ahead mark
 * (`dispatched_at`), so the audit service's containment monitor can find an effect that reached
 * a system of record with an epoch below the one in force when it ran
 * (docs/decisions/0280-cancel-a-scheduled-change.md). Backward compatible: a nullable column the
 * former release neither reads nor writes (null: dispatched before this migration, or never).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE operations ADD COLUMN token_epoch integer`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE operations DROP COLUMN token_epoch`.execute(db);
}
