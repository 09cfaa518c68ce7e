import { sql, type Kysely } from 'kysely';

/**
 * Two-person overrides of release checks (docs/decisions/0210-canary-analysis.md,
 * docs/decisions/0230-two-person-release-changes.md): an operator asks to go past a failing
 * canary analysis, a failing gate (`--force`) or a loosened limit, a second operator approves it,
 * and the release command that needed it consumes it once. Bound to the release and a digest of what failed;
 * it expires. Backward compatible: a new table only.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE release_overrides (
      id uuid PRIMARY KEY,
      release_id text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('canary', 'force_gate', 'raise_limits')),
      failure_digest text NOT NULL,
      reason text NOT NULL,
      requested_by text NOT NULL,
      approved_by text,
      status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'used')),
      expires_at timestamptz NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      decided_at timestamptz,
      used_at timestamptz,
      CHECK (approved_by IS NULL OR approved_by <> requested_by)
    );
    CREATE INDEX release_overrides_release ON release_overrides (release_id, status);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE release_overrides`.execute(db);
}
