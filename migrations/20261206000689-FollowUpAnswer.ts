import { sql, type Kysely } from 'kysely';

/**
 * The answer a follow-up message got (docs/decisions/0510-follow-up-idempotency-key.md, amended):
 * `conversation_items.follow_up_superseded` holds, on a follow-up's `user_message` row that
 * carries an `Idempotency-Key`, the `superseded` list its `202` answered — the actions it
 * superseded, each `{version, tool, voidedApprovals}` — so a retry with that key is answered the
 * same list. Null on every other row. Backward compatible: a nullable column (no rewrite); a
 * former release neither reads nor writes it (its replays answer `superseded: []`, as before).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE conversation_items ADD COLUMN IF NOT EXISTS follow_up_superseded jsonb`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE conversation_items DROP COLUMN IF EXISTS follow_up_superseded`.execute(db);
}
