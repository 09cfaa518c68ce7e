import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { inTransaction } from '@gatehouse/ledger';
import { refundSums } from '@gatehouse/policy';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// Migration 20261206000702-RefundSumsReadCandidatesOnce (ADR 0702): a refund decision's sums read
// the tenant's refunds on the order and of the last day, each once — never the ledger's whole
// history of refunds. The body of 20261206000682 joined its candidates back to `actions` by
// hashing, with a scan of every action, so every decision grew with the ledger.

const TENANT = 'quillfeather';
const HISTORY = 20_000;
/** Refunds of the last day: many candidates, as in a busy tenant, which is when the planner hashed them against every action. */
const TODAY = 1_500;
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** Succeeded refunds of `cents` each, one workflow and action per row, decided `hoursAgo` hours ago on `orderId` (an expression of `g`). */
async function refunds(n: number, order: (g: string) => ReturnType<typeof sql>, cents: number, hoursAgo: number): Promise<void> {
  await sql`WITH w AS (
      INSERT INTO workflows (id, tenant, ticket_id, user_id, pack, mode, text_sha256, state, release_id, policy_revision, catalog_digest, created_at, updated_at)
      SELECT gen_random_uuid(), ${TENANT}, 'H-' || gen_random_uuid(), 'rep-ana', 'support', 'act', repeat('a', 64), 'completed', 'rel-1',
             'support-p1', repeat('f', 64), now() - make_interval(hours => ${hoursAgo}), now()
        FROM generate_series(1, ${n}::int)
      RETURNING id, created_at),
    p AS (
      INSERT INTO proposals (id, workflow_id, round, call_id, tool, arguments_sha256, status, created_at)
      SELECT gen_random_uuid(), w.id, 1, 'call_' || w.id, 'issue_refund', repeat('0', 64), 'valid', w.created_at FROM w
      RETURNING id, workflow_id, call_id, created_at)
    INSERT INTO actions (id, workflow_id, proposal_id, call_id, version, tool, target, arguments, digest, decision, rule_id,
        policy_revision, status, operation_key, release_id, created_at, updated_at)
    SELECT gen_random_uuid(), p.workflow_id, p.id, p.call_id, 1, 'issue_refund', o.target,
           jsonb_build_object('orderId', o.target, 'amountCents', ${cents}::int, 'reason', 'seeded'), md5(p.id::text) || md5(p.call_id),
           'ALLOW', 'ALL', 'support-p1', 'succeeded', p.workflow_id || ':action:1', 'rel-1', p.created_at, p.created_at
      FROM (SELECT p.*, row_number() OVER () AS g FROM p) p, LATERAL (SELECT ${order('p.g')} AS target) o`.execute(t.db);
}

describe('a refund decision reads the order and the last day of refunds, not the ledger’s history', () => {
  it(`with ${HISTORY} refunds of older days and ${TODAY} of the last day, the sums read the day's and the order's actions, not the history, and stay exact`, async () => {
    await refunds(HISTORY, (g) => sql`'H-old-' || ${sql.raw(g)}`, 100, 48 + 24 * 20);
    await refunds(1, () => sql`'H-order'`, 1_000, 24 * 5); // the order's basis counts it whenever it was decided
    await refunds(TODAY, (g) => sql`'H-today-' || ${sql.raw(g)}`, 10, 2); // the user's and the tenant's day count them
    await sql`ANALYZE`.execute(t.db);

    const { sums, read } = await inTransaction(t.db, async (trx) => {
      const s = await refundSums(trx, { tenant: TENANT, orderId: 'H-order', userId: 'rep-ana', includeQueued: true });
      // This transaction's own counts of rows returned by scans of the table (seq and index).
      const { rows } = await sql<{ n: string }>`
        SELECT pg_stat_get_xact_tuples_returned('actions'::regclass)
             + pg_stat_get_xact_tuples_fetched('actions'::regclass) AS n`.execute(trx);
      return { sums: s, read: Number(rows[0]!.n) };
    });
    expect(sums).toMatchObject({ orderCents: 1_000, user24hCents: TODAY * 10, tenant24hCents: TODAY * 10, tenant1hCents: 0 });
    // Each of the day's refunds and the order's, found through an index: a few thousand rows at most.
    // With the body of 20261206000682, every action of the ledger (> 20,000) was scanned.
    expect(read).toBeLessThan(4 * TODAY);
  });
});
