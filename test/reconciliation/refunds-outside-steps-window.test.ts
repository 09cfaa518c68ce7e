import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { inTransaction } from '@gatehouse/ledger';
import { refundSums } from '@gatehouse/policy';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// Migration 20261206000697-RefundsOutsideStepsByWindow (ADR 0686, "Reading them"): a refund
// decision reads, of the refunds reconciliation found outside the agent's steps, only those of the
// order and those of the last day — the only ones any of its sums counts. Adopted items are kept
// for ever, so reading the tenant's whole history would grow every decision without bound.

const TENANT = 'quillfeather';
const HISTORY = 3000;
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** Adopted ledger entries without a step (they count toward the limits, ADR 0686), found `daysAgo` days ago. */
async function adopted(items: Array<{ orderId: string; cents: number; daysAgo: number }>): Promise<void> {
  await t.db
    .insertInto('reconciliation_items')
    .values(
      items.map((i) => ({
        id: randomUUID(),
        run_id: randomUUID(),
        class: 'ledger_entry_without_step',
        owner: 'on-call',
        status: 'resolved',
        remediation: 'adopt',
        subject: `refund:re_${randomUUID()}`,
        detail: '{}',
        tenant: TENANT,
        tool: 'issue_refund',
        order_id: i.orderId,
        amount_cents: String(i.cents),
        created_at: new Date(Date.now() - i.daysAgo * 86_400_000),
      })),
    )
    .execute();
}

describe('a refund decision reads the order and the last day of reconciliation refunds, not the tenant’s history', () => {
  it(`with ${HISTORY} adopted refunds of older days in the tenant, the sums read a handful of items and stay exact`, async () => {
    const order = `Q-${randomUUID().slice(0, 8)}`;
    await adopted(Array.from({ length: HISTORY }, (_, i) => ({ orderId: `Q-old-${i}`, cents: 100, daysAgo: 3 + (i % 30) })));
    await adopted([
      { orderId: order, cents: 1_000, daysAgo: 5 }, // the order's basis counts it whenever it was found
      { orderId: `Q-${randomUUID().slice(0, 8)}`, cents: 700, daysAgo: 0.5 }, // the tenant's day counts it
    ]);
    await sql`ANALYZE reconciliation_items`.execute(t.db);

    const { sums, read } = await inTransaction(t.db, async (trx) => {
      const s = await refundSums(trx, { tenant: TENANT, orderId: order, userId: 'rep-ana', includeQueued: true });
      // This transaction's own counts of rows returned by scans of the table (seq and index).
      const { rows } = await sql<{ n: string }>`
        SELECT pg_stat_get_xact_tuples_returned('reconciliation_items'::regclass)
             + pg_stat_get_xact_tuples_fetched('reconciliation_items'::regclass) AS n`.execute(trx);
      return { sums: s, read: Number(rows[0]!.n) };
    });
    expect(sums).toMatchObject({ orderCents: 1_000, tenant24hCents: 700, tenant1hCents: 0 });
    expect(read).toBeLessThan(50); // ~3000 without the window's bound
  });
});
