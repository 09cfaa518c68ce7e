import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Migrator, sql, type Kysely } from 'kysely';
import { migrations } from '@gatehouse/migrations';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// Migration ReleaseFirstActive (docs/decisions/0660-a-rollback-restores-a-release-that-ran.md):
// on a ledger that ran before it, `first_active_at` is backfilled for the releases the ledger and
// its audit trail show were active for everyone, and stays null for a candidate a rollback retired.

const NAME = '20261206000100-ReleaseFirstActive';
let t: TestDatabase;
let k: Kysely<unknown>;

/** One release row as the former schema holds it. */
async function release(id: string, status: string, activatedAt: string | null): Promise<void> {
  await sql`INSERT INTO releases (id, manifest, status, activated_at) VALUES (${id}, '{}'::jsonb, ${status}, ${activatedAt})`.execute(k);
}

/** One audit event about release `id`, pending in the outbox or already chained. */
async function event(type: string, outcome: string, id: string, atMs: number, chained = false): Promise<void> {
  const e = JSON.stringify({ type, outcome, atMs, revisions: { release: id } });
  if (!chained) return void (await sql`INSERT INTO audit_outbox (event) VALUES (${e}::jsonb)`.execute(k));
  await sql`INSERT INTO audit_log (seq, outbox_id, event, prev_hash, hash)
    VALUES (${atMs}, ${atMs}, ${e}::jsonb, ${'0'.repeat(64)}, ${'a'.repeat(64)})`.execute(k);
}

beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  k = t.db as unknown as Kysely<unknown>;
  const migrator = new Migrator({ db: k, provider: { getMigrations: async () => migrations } });
  const before = Object.keys(migrations).sort();
  const r = await migrator.migrateTo(before[before.indexOf(NAME) - 1]!);
  expect(r.error).toBeUndefined();
  // rel-1: the ledger's first release, active at boot (no audited activation), since retired.
  await release('rel-1', 'retired', '2026-12-01T00:00:00Z');
  // rel-2: a candidate promoted to everyone (audited, already chained), then rolled back from.
  await release('rel-2', 'retired', '2026-12-02T00:00:00Z');
  await event('release.activated', 'candidate', 'rel-2', 1_000);
  await event('release.activated', 'active', 'rel-2', 2_000, true);
  // rel-3: restored by a rollback (the event names the restored release); active now.
  await release('rel-3', 'active', '2026-12-04T00:00:00Z');
  await event('release.rolled_back', 'from:rel-4;reason:x', 'rel-3', 4_000);
  // rel-4: a candidate a rollback retired before its promotion (the two-step bypass).
  await release('rel-4', 'retired', '2026-12-03T00:00:00Z');
  await event('release.activated', 'candidate', 'rel-4', 3_000);
  // rel-5: registered at boot as a candidate, never activated at all.
  await release('rel-5', 'candidate', null);
  const up = await migrator.migrateTo(NAME);
  expect(up.error).toBeUndefined();
});
afterAll(async () => {
  await t?.drop();
});

describe('ReleaseFirstActive backfill', () => {
  it('sets first_active_at for every release the ledger or the audit trail shows was active, and only those', async () => {
    const rows = await sql<{ id: string; first_active_at: Date | null }>`
      SELECT id, first_active_at FROM releases ORDER BY id`.execute(k);
    expect(rows.rows.map((r) => [r.id, r.first_active_at?.toISOString() ?? null])).toEqual([
      ['rel-1', '2026-12-01T00:00:00.000Z'],
      ['rel-2', new Date(2_000).toISOString()],
      ['rel-3', new Date(4_000).toISOString()],
      ['rel-4', null],
      ['rel-5', null],
    ]);
  });

  it('goes down and up again', async () => {
    const migrator = new Migrator({ db: k, provider: { getMigrations: async () => migrations } });
    expect((await migrator.migrateDown()).error).toBeUndefined();
    expect((await migrator.migrateUp()).error).toBeUndefined();
  });
});
