import { sql, type Kysely } from 'kysely';

/**
 * A follow-up message (`POST /v1/workflows/:id/messages`) may carry an `Idempotency-Key` header
 * (docs/decisions/0510-follow-up-idempotency-key.md): the key is stored on its `user_message` row,
 * unique per workflow, so a client that retries after a timeout or a 503 adds the message once.
 * Backward compatible: a nullable column (no rewrite) and a partial unique index over the rows
 * that carry a key (none before this migration). The index is built inside the migration's
 * transaction, which blocks writes to `conversation_items` while it is built; on a large table,
 * build it beforehand with `CREATE UNIQUE INDEX CONCURRENTLY conversation_items_idempotency_key …`
 * (then this is a no-op).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE conversation_items ADD COLUMN IF NOT EXISTS idempotency_key text`.execute(db);
  await sql`CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_idempotency_key
    ON conversation_items (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS conversation_items_idempotency_key`.execute(db);
  await sql`ALTER TABLE conversation_items DROP COLUMN IF EXISTS idempotency_key`.execute(db);
}
