import { sql, type Kysely } from 'kysely';

/**
 * When each release was first the active release, for everyone
 * (docs/decisions/0660-a-rollback-restores-a-release-that-ran.md): a rollback restores only a
 * release that was once active, never a candidate that a rollback retired before it was promoted.
 * Backward compatible: a nullable column the former release neither reads nor writes.
 *
 * Backfill, from what the ledger and its audit trail still say: the active release; every release
 * an audited activation for everyone (`release.activated` with outcome `active…`) or a rollback
 * (`release.rolled_back`, which names the restored release) made active, at the earliest such
 * event; and a release with an activation time but no audited activation at all, which only the
 * boot registration of a ledger's first release gives. A release that was active only in ways the
 * trail no longer shows stays null (ADR 0660 names them).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE releases ADD COLUMN IF NOT EXISTS first_active_at timestamptz`.execute(db);
  await sql`
    WITH events AS (
      SELECT event FROM audit_outbox UNION ALL SELECT event FROM audit_log
    ), made_active AS (
      SELECT event->'revisions'->>'release' AS id, min(to_timestamp((event->>'atMs')::bigint / 1000.0)) AS at
      FROM events
      WHERE (event->>'type' = 'release.activated' AND event->>'outcome' LIKE 'active%')
         OR event->>'type' = 'release.rolled_back'
      GROUP BY 1
    ), audited AS (
      SELECT DISTINCT event->'revisions'->>'release' AS id FROM events WHERE event->>'type' = 'release.activated'
    )
    UPDATE releases r
    SET first_active_at = coalesce((SELECT m.at FROM made_active m WHERE m.id = r.id), r.activated_at, r.created_at)
    WHERE r.first_active_at IS NULL
      AND (r.status = 'active'
        OR EXISTS (SELECT 1 FROM made_active m WHERE m.id = r.id)
        OR (r.activated_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audited a WHERE a.id = r.id)))`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE releases DROP COLUMN IF EXISTS first_active_at`.execute(db);
}
