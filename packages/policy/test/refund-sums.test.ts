// The one-statement refund sums a refund decision reads (`refundSums`) against the per-limit sum
// they replace (`recordedRefundsCents`), on a real Postgres: refunds of two tenants, three users
// and three orders, in every status, created inside the hour, inside the day and before it. Each
// of the four sums must equal the per-limit sum for the same filter, with and without the queued
// refunds and with one action left out (the re-evaluation at execution).
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
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
    for (const excludeActionId of [undefined, actionIds[3], actionIds[40]]) {
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

  it('counts something in every sum (the seed is not vacuous)', async () => {
    const got = await refundSums(tdb.db, { tenant: 'quillfeather', userId: 'rep-ana', orderId: 'O-1', includeQueued: true });
    for (const v of Object.values(got)) expect(v).toBeGreaterThan(0);
  });
});
