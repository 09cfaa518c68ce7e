import { sql, type Kysely } from 'kysely';

/**
 * Reasoning items and prompt revisions (docs/decisions/0145-reasoning-items-in-the-transcript.md,
 * docs/decisions/0146-execution-audit-fields.md):
 * - `conversation_items.kind` may be `reasoning`: the model's opaque reasoning items (with
 *   `encrypted_content`, `store: false`) kept in the transcript just before the function calls
 *   they preceded, so the next round sends them back in order;
 * - `model_turns.instructions_sha256`: the digest of the instructions of that round, so an
 *   execution's audit events name the prompt revision that proposed it.
 * Backward compatible: a wider CHECK and a nullable column.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE conversation_items DROP CONSTRAINT conversation_items_kind_check;
    ALTER TABLE conversation_items ADD CONSTRAINT conversation_items_kind_check
      CHECK (kind IN ('user_message','assistant_message','function_call','function_call_output','reasoning'));
    ALTER TABLE model_turns ADD COLUMN instructions_sha256 text;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DELETE FROM conversation_items WHERE kind = 'reasoning';
    ALTER TABLE conversation_items DROP CONSTRAINT conversation_items_kind_check;
    ALTER TABLE conversation_items ADD CONSTRAINT conversation_items_kind_check
      CHECK (kind IN ('user_message','assistant_message','function_call','function_call_output'));
    ALTER TABLE model_turns DROP COLUMN instructions_sha256;
  `.execute(db);
}
