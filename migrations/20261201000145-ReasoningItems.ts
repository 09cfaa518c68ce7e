import { sql, type Kysely } from 'kysely';

/**
 * Reasoning items and prompt revisions (docs/decisions/0145-reasoning-items-in-the-transcript.md,
 * docs/decisions/0146-execution-audit-fields.md):
 * - `conversation_items.reasoning`: on a `function_call` row, the model's opaque reasoning items
 *   (with `encrypted_content`, `store: false`) that preceded that call, in order, so the next
 *   round sends them back right before it;
 * - `model_turns.instructions_sha256`: the digest of the instructions of that round, so an
 *   execution's audit events name the prompt revision that proposed it.
 * Backward compatible: two nullable columns.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE conversation_items ADD COLUMN reasoning jsonb`.execute(db);
  await sql`ALTER TABLE model_turns ADD COLUMN instructions_sha256 text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE conversation_items DROP COLUMN reasoning`.execute(db);
  await sql`ALTER TABLE model_turns DROP COLUMN instructions_sha256`.execute(db);
}
