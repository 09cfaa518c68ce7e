import { sql, type Kysely } from 'kysely';

/**
 * Revocation of user bearer tokens (docs/decisions/0695-user-tokens-can-be-revoked.md):
 *
 * - `user_token_not_before`: one row per subject (`sub` of the token); a token of that subject
 *   issued before `not_before` (its `iat`, whole seconds) is refused. A repeated revocation moves
 *   `not_before` forward, never back.
 * - `user_token_revoked_jtis`: one row per revoked token id (`jti`), with its subject.
 *
 * Both keep who revoked and why. Backward compatible: two new tables, which a former release
 * neither reads nor writes (it does not refuse revoked tokens).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE IF NOT EXISTS user_token_not_before (
      subject text PRIMARY KEY,
      not_before timestamptz NOT NULL,
      revoked_by text NOT NULL,
      reason text NOT NULL,
      revoked_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`
    CREATE TABLE IF NOT EXISTS user_token_revoked_jtis (
      jti text PRIMARY KEY,
      subject text NOT NULL,
      revoked_by text NOT NULL,
      reason text NOT NULL,
      revoked_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX IF NOT EXISTS user_token_revoked_jtis_by_subject ON user_token_revoked_jtis (subject)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS user_token_revoked_jtis`.execute(db);
  await sql`DROP TABLE IF EXISTS user_token_not_before`.execute(db);
}
