// The one-statement refund sums a refund decision reads (`refundSums`) against the per-limit sum
// they replace (`recordedRefundsCents`), on a real Postgres: refunds of two tenants, three users
// and three orders, in every status, created inside the hour, inside the day and before it. Each
// of the four sums must equal the per-limit sum for the same filter, with and without the queued
// refunds and with one action left out (the re-evaluation at execution). Some refunds were decided
// before the day and claimed (their operation reserved) inside the hour or the day: the windows
// place a refund that ran at its claim (ADR 0682). Reconciliation items hold money out beside the
// agent's refunds (ADR 0686): ledger entries without a step (live, adopted, reversed), a refund
// under a failed step, amount mismatches (live, ratified, reversed), of both tenants and of none.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { recordedRefundsCents, refundSums } from '../src/index.ts';

const HOUR_MS = 3_600_000;
const TENANTS = ['quillfeather', 'northwind'] as const;
const USERS = ['rep-ana', 'rep-ben', 'rep-cy'] as const;
const ORDERS = ['O-1', 'O-2', 'O-3'] as const;
const STATUSES = ['approved', 'running', 'succeeded', 'failed_unknown', 'failed', 'denied', 'compensated'] as const;
/** Ages of the seeded refunds, ms: inside the hour, inside the day, just past the day. */
const AGES_MS = [5 * 60_000, 5 * HOUR_MS, 25 * HOUR_MS] as const;

let tdb: TestDatabase;
const actionIds: string[] = [];
/** The refunds decided 30 h ago and claimed later, in seeding order. */
const claimedIds: string[] = [];

beforeAll(async () => {
  tdb = await createTestDatabase();
  let i = 0;
  for (const tenant of TENANTS)
    for (const userId of USERS)
      for (const orderId of ORDERS) {
        for (const ageMs of AGES_MS) {
          const status = STATUSES[i % STATUSES.length]!;
          const a = await createAction(tdb.db, { tenant, userId, orderId, amountCents: 100 + 37 * i, decision: 'ALLOW' });
          await sql`UPDATE actions SET status = ${status}, created_at = now() - make_interval(secs => ${ageMs / 1000}) WHERE id = ${a.actionId}`.execute(
            tdb.db,
          );
          actionIds.push(a.actionId);
          i++;
        }
      }
  // Decided 30 h ago, claimed 5 minutes, 5 hours or 26 hours ago, in a status that counts or not.
  const CLAIMED = [
    ['running', 5 * 60_000],
    ['succeeded', 5 * HOUR_MS],
    ['failed_unknown', 5 * 60_000],
    ['succeeded', 26 * HOUR_MS],
  ] as const;
  for (const tenant of TENANTS)
    for (const [k, [status, claimedMs]] of CLAIMED.entries()) {
      const userId = USERS[k % USERS.length]!;
      const orderId = ORDERS[(k + 1) % ORDERS.length]!;
      const a = await createAction(tdb.db, { tenant, userId, orderId, amountCents: 1000 + 11 * k, decision: 'ALLOW' });
      await recordEffect(tdb.db, a, { status });
      await sql`UPDATE actions SET created_at = now() - interval '30 hours' WHERE id = ${a.actionId}`.execute(tdb.db);
      await sql`UPDATE operations SET created_at = now() - make_interval(secs => ${claimedMs / 1000}) WHERE key = ${a.operationKey}`.execute(
        tdb.db,
      );
      actionIds.push(a.actionId);
      claimedIds.push(a.actionId);
    }
  await seedReconciliationItems();
});

/** One reconciliation item as a pass and a remediation would leave it (ADR 0686). */
async function item(i: {
  cls: 'ledger_entry_without_step' | 'amount_mismatch';
  status: 'open' | 'frozen' | 'resolved' | 'auto_resolved';
  remediation?: 'adopt' | 'ratify' | 'reverse';
  tenant: string | null;
  orderId: string;
  cents: number;
  operationKey?: string;
  ageMs: number;
  detail?: Record<string, unknown>;
}): Promise<void> {
  await sql`INSERT INTO reconciliation_items (id, run_id, class, owner, status, subject, operation_key, tenant, tool, order_id, amount_cents, ledger_ref, remediation, detail, created_at)
    VALUES (gen_random_uuid(), gen_random_uuid(), ${i.cls}, 'payments-lead', ${i.status}, ${`refund:re_${randomUUID()}`}, ${i.operationKey ?? null},
            ${i.tenant}, 'issue_refund', ${i.orderId}, ${i.cents}, ${`re_${randomUUID()}`}, ${i.remediation ?? null}, ${JSON.stringify(i.detail ?? {})}::jsonb,
            now() - make_interval(secs => ${i.ageMs / 1000}))`.execute(tdb.db);
}

async function seedReconciliationItems(): Promise<void> {
  const lews = 'ledger_entry_without_step' as const;
  for (const [k, tenant] of TENANTS.entries()) {
    await item({ cls: lews, status: 'open', tenant, orderId: 'O-1', cents: 4001 + k, ageMs: 5 * 60_000 });
    await item({ cls: lews, status: 'resolved', remediation: 'adopt', tenant, orderId: 'O-2', cents: 4100 + k, ageMs: 5 * HOUR_MS });
    await item({ cls: lews, status: 'resolved', remediation: 'reverse', tenant, orderId: 'O-3', cents: 4200 + k, ageMs: 5 * 60_000 });
    await item({ cls: lews, status: 'auto_resolved', tenant, orderId: 'O-1', cents: 4300 + k, ageMs: 5 * 60_000 });
    // A refund under a failed step, and mismatches on steps that count or not.
    const failed = await createAction(tdb.db, { tenant, userId: 'rep-ana', orderId: 'O-3', amountCents: 700, decision: 'ALLOW' });
    await recordEffect(tdb.db, failed, { status: 'succeeded' });
    await sql`UPDATE actions SET status = 'failed' WHERE id = ${failed.actionId}`.execute(tdb.db);
    await sql`UPDATE operations SET status = 'failed' WHERE key = ${failed.operationKey}`.execute(tdb.db);
    await item({ cls: lews, status: 'open', tenant, orderId: 'O-3', cents: 700, operationKey: failed.operationKey, ageMs: 5 * 60_000 });
    for (const [j, [status, remediation]] of (
      [
        ['frozen', undefined],
        ['resolved', 'ratify'],
        ['resolved', 'reverse'],
      ] as const
    ).entries()) {
      const a = await createAction(tdb.db, { tenant, userId: USERS[j]!, orderId: ORDERS[j]!, amountCents: 500, decision: 'ALLOW' });
      await recordEffect(tdb.db, a, { status: 'succeeded' });
      actionIds.push(a.actionId);
      await item({
        cls: 'amount_mismatch',
        status,
        remediation,
        tenant,
        orderId: ORDERS[j]!,
        cents: 900 + j,
        operationKey: a.operationKey,
        ageMs: 5 * HOUR_MS,
      });
    }
  }
  // An order the directory does not know: no tenant.
  await item({ cls: lews, status: 'open', tenant: null, orderId: 'O-2', cents: 4500, ageMs: 5 * 60_000 });
}

afterAll(async () => {
  await tdb?.drop();
});

describe('refundSums', () => {
  const cases = TENANTS.flatMap((tenant) =>
    USERS.flatMap((userId) =>
      ORDERS.flatMap((orderId) => [true, false].map((includeQueued) => ({ tenant, userId, orderId, includeQueued }))),
    ),
  );

  it.each(cases)('equals the per-limit sums: $tenant $userId $orderId queued=$includeQueued', async (c) => {
    for (const excludeActionId of [undefined, actionIds[3], actionIds[40], actionIds[actionIds.length - 2]]) {
      const got = await refundSums(tdb.db, { ...c, excludeActionId });
      const base = { tenant: c.tenant, includeQueued: c.includeQueued, excludeActionId };
      expect(got).toEqual({
        orderCents: await recordedRefundsCents(tdb.db, { ...base, orderId: c.orderId }),
        user24hCents: await recordedRefundsCents(tdb.db, { ...base, userId: c.userId, sinceMs: 24 * HOUR_MS }),
        tenant1hCents: await recordedRefundsCents(tdb.db, { ...base, sinceMs: HOUR_MS, agentOnly: true }),
        tenant24hCents: await recordedRefundsCents(tdb.db, { ...base, sinceMs: 24 * HOUR_MS }),
      });
    }
  });

  it('counts a refund decided before the day from its claim: inside the hour, the day, or neither', async () => {
    // quillfeather, rep-ana: claimed 5 minutes ago (running, 1000) on O-2; rep-ben: 5 hours ago (succeeded, 1011) on O-3
    const got = await refundSums(tdb.db, { tenant: 'quillfeather', userId: 'rep-ben', orderId: 'O-3', includeQueued: false });
    const without = await refundSums(tdb.db, {
      tenant: 'quillfeather',
      userId: 'rep-ben',
      orderId: 'O-3',
      includeQueued: false,
      excludeActionId: claimedIds[1],
    });
    expect(got.user24hCents - without.user24hCents).toBe(1011);
    expect(got.tenant24hCents - without.tenant24hCents).toBe(1011);
    expect(got.tenant1hCents - without.tenant1hCents).toBe(0);
  });

  it('counts something in every sum (the seed is not vacuous)', async () => {
    const got = await refundSums(tdb.db, { tenant: 'quillfeather', userId: 'rep-ana', orderId: 'O-1', includeQueued: true });
    for (const v of Object.values(got)) expect(v).toBeGreaterThan(0);
  });
});

describe('money reconciliation found out counts toward the limits (ADR 0686)', () => {
  const read = (orderId: string, userId = 'rep-cy', excludeActionId?: string) =>
    refundSums(tdb.db, { tenant: 'quillfeather', orderId, userId, includeQueued: false, excludeActionId });
  const delta = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.keys(a).map((k) => [k, a[k]! - b[k]!]));

  it('an adopted or unexplained ledger entry counts for its order and the tenant day, never the agent hour; a reversed or vanished one not at all', async () => {
    const before = await read('R-1');
    await item({
      cls: 'ledger_entry_without_step',
      status: 'resolved',
      remediation: 'adopt',
      tenant: 'quillfeather',
      orderId: 'R-1',
      cents: 40_000,
      ageMs: 60_000,
    });
    await item({ cls: 'ledger_entry_without_step', status: 'open', tenant: 'quillfeather', orderId: 'R-1', cents: 1_000, ageMs: 60_000 });
    await item({
      cls: 'ledger_entry_without_step',
      status: 'resolved',
      remediation: 'reverse',
      tenant: 'quillfeather',
      orderId: 'R-1',
      cents: 7,
      ageMs: 60_000,
    });
    await item({
      cls: 'ledger_entry_without_step',
      status: 'auto_resolved',
      tenant: 'quillfeather',
      orderId: 'R-1',
      cents: 9,
      ageMs: 60_000,
    });
    // An order outside the directory (no tenant on the item): its order basis only, in no window.
    await item({ cls: 'ledger_entry_without_step', status: 'open', tenant: null, orderId: 'R-1', cents: 300, ageMs: 60_000 });
    expect(delta({ ...(await read('R-1')) }, { ...before })).toEqual({
      orderCents: 41_300,
      user24hCents: 0,
      tenant1hCents: 0,
      tenant24hCents: 41_000,
    });
  });

  it('a refund under a failed step counts once: whole while its step does not count, not again once it does', async () => {
    const a = await createAction(tdb.db, {
      tenant: 'quillfeather',
      userId: 'rep-cy',
      orderId: 'R-2',
      amountCents: 2_500,
      decision: 'ALLOW',
    });
    await recordEffect(tdb.db, a, { status: 'succeeded' });
    await sql`UPDATE actions SET status = 'failed' WHERE id = ${a.actionId}`.execute(tdb.db);
    const before = await read('R-2');
    await item({
      cls: 'ledger_entry_without_step',
      status: 'open',
      tenant: 'quillfeather',
      orderId: 'R-2',
      cents: 2_500,
      operationKey: a.operationKey,
      ageMs: 60_000,
    });
    const open = await read('R-2');
    expect(delta({ ...open }, { ...before })).toEqual({
      orderCents: 2_500,
      user24hCents: 2_500,
      tenant1hCents: 2_500,
      tenant24hCents: 2_500,
    });
    // Its step counted (an adoption settled it): the agent's action carries the refund, the item adds nothing.
    await sql`UPDATE actions SET status = 'succeeded' WHERE id = ${a.actionId}`.execute(tdb.db);
    expect((await read('R-2')).orderCents).toBe(open.orderCents);
  });

  it('a ledger entry whose key names a step reserved after the pass read the steps counts once, with that step', async () => {
    const a = await createAction(tdb.db, {
      tenant: 'quillfeather',
      userId: 'rep-cy',
      orderId: 'R-4',
      amountCents: 2_000,
      decision: 'ALLOW',
    });
    await recordEffect(tdb.db, a, { status: 'succeeded' });
    const before = await read('R-4');
    await item({
      cls: 'ledger_entry_without_step',
      status: 'open',
      tenant: 'quillfeather',
      orderId: 'R-4',
      cents: 2_000,
      ageMs: 60_000,
      detail: { idempotencyKey: a.operationKey },
    });
    expect(await read('R-4')).toEqual(before);
  });

  it('a ratified or live amount mismatch counts the larger of the two amounts; a reversed one nothing', async () => {
    const steps = [];
    for (const [status, remediation, ledger] of [
      ['resolved', 'ratify', 45_000],
      ['frozen', undefined, 3_000],
      ['resolved', 'reverse', 90_000],
    ] as const) {
      const a = await createAction(tdb.db, {
        tenant: 'quillfeather',
        userId: 'rep-cy',
        orderId: 'R-3',
        amountCents: 5_000,
        decision: 'ALLOW',
      });
      await recordEffect(tdb.db, a, { status: 'succeeded' });
      if (remediation === 'reverse') await sql`UPDATE actions SET status = 'compensated' WHERE id = ${a.actionId}`.execute(tdb.db);
      await item({
        cls: 'amount_mismatch',
        status,
        remediation,
        tenant: 'quillfeather',
        orderId: 'R-3',
        cents: ledger,
        operationKey: a.operationKey,
        ageMs: 60_000,
      });
      steps.push(a);
    }
    // 45 000 (the ledger moved more than the 5 000 asked) + 5 000 (the ledger moved less: the agent's amount stands).
    expect((await read('R-3')).orderCents).toBe(50_000);
  });
});
