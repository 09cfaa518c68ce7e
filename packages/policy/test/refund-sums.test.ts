// The one-statement refund sums a refund decision reads (`refundSums`) against the per-limit sum
// they replace (`recordedRefundsCents`), on a real Postgres: refunds of two tenants, three users
// and three orders, in every status, created inside the hour, inside the day and before it. Each
// of the four sums must equal the per-limit sum for the same filter, with and without the queued
// refunds and with one action left out (the re-evaluation at execution). Some refunds were decided
// before the day and claimed (their operation reserved) inside the hour or the day: the windows
// place a refund that ran at its claim (ADR 0682).
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
    }
});

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
        tenant1hCents: await recordedRefundsCents(tdb.db, { ...base, sinceMs: HOUR_MS }),
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
      excludeActionId: actionIds[actionIds.length - 7],
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
