import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { refundSums } from '../../packages/policy/src/index.ts';
import { BUNDLES, startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0682-a-held-refund-counts-from-its-claim.md: refunds decided long ago and held
// (a switched-off tool, a staged re-enable) that run now are money out now. The rolling windows
// (R5 the user's day, R6 the tenant's hour, R10 the tenant's day) place a refund that ran at its
// claim, so the re-evaluation at execution sees the held refunds that ran before it, and a later
// decision sees them all. On the code before, every held refund was counted at its decision,
// outside the windows, and the burst passed the hour's limit.

const TRIALS = Number(process.env.HELD_REFUND_TRIALS ?? 15);
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12 });
});
afterAll(async () => {
  await h?.close();
});
// Each test starts with nothing in any window: what an earlier one recorded is moved two days back.
beforeEach(async () => {
  await sql`UPDATE actions SET created_at = now() - interval '2 days'`.execute(h.db);
  await sql`UPDATE operations SET created_at = now() - interval '2 days'`.execute(h.db);
});

/** Allowed refunds of 30.00 on fresh orders of quillfeather (rep-ana and rep-ben alternating), decided `age` ago and not yet run. */
async function held(n: number, age: string): Promise<Array<Awaited<ReturnType<typeof createAction>> & { orderId: string }>> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3000, userId: i % 2 ? 'rep-ben' : 'rep-ana', decision: 'ALLOW' });
    await sql`UPDATE actions SET created_at = now() - ${age}::interval WHERE id = ${a.actionId}`.execute(h.db);
    out.push({ ...a, orderId });
  }
  return out;
}

async function paidOn(orderIds: string[]): Promise<number> {
  let paid = 0;
  for (const o of orderIds) paid += (await h.refunds(o)).reduce((s, r) => s + r.amountCents, 0);
  return paid;
}

describe('rolling windows count a held refund from its claim (ADR 0682)', () => {
  it("held refunds decided two hours ago, released one after another, stay within the tenant's hour (R6)", async () => {
    const limits = { ...BUNDLES.support.limits, agentRolling1hCents: 10_000 };
    const deps = h.deps({ bundles: { ...BUNDLES, support: { ...BUNDLES.support, limits } } });
    const refunds = await held(4, '2 hours');
    const outcomes: string[] = [];
    for (const a of refunds) outcomes.push(await processExecution(a.job, deps));
    // three of 30.00 fit in 100.00; the fourth is decided again under the hour's limit and denied
    expect(outcomes).toEqual(['succeeded', 'succeeded', 'succeeded', 'reevaluated:DENY:R6']);
    expect(await paidOn(refunds.map((a) => a.orderId))).toBe(9000);
    // and a decision made now sees the hour's 90.00 that just ran
    const sums = await refundSums(h.db, { tenant: 'quillfeather', orderId: 'X-0001', userId: 'rep-ana', includeQueued: true });
    expect(sums.tenant1hCents).toBe(9000);
  });

  it(`held refunds released all at once (a re-enable releases every held step) stay within the tenant's hour (× ${TRIALS})`, async () => {
    const limits = { ...BUNDLES.support.limits, agentRolling1hCents: 10_000 };
    const deps = h.deps({ bundles: { ...BUNDLES, support: { ...BUNDLES.support, limits } } });
    const anomalies: string[] = [];
    for (let t = 0; t < TRIALS; t++) {
      const refunds = await held(6, '2 hours');
      const settled = await Promise.allSettled(refunds.map((a) => processExecution(a.job, deps)));
      const outcomes = settled.map((r) => (r.status === 'fulfilled' ? r.value : `error:${String(r.reason)}`));
      const paid = await paidOn(refunds.map((a) => a.orderId));
      if (paid !== 9000 || outcomes.filter((o) => o === 'reevaluated:DENY:R6').length !== 3)
        anomalies.push(`trial ${t}: paid ${paid}, ${outcomes.join(', ')}`);
      await sql`UPDATE actions SET created_at = now() - interval '2 days'`.execute(h.db);
      await sql`UPDATE operations SET created_at = now() - interval '2 days'`.execute(h.db);
    }
    expect(anomalies).toEqual([]);
  }, 120_000);

  it("held refunds decided yesterday, released now, stay within the user's day (R5) and the tenant's day (R10)", async () => {
    const bundles = { ...BUNDLES, support: { ...BUNDLES.support, limits: { ...BUNDLES.support.limits, userRolling24hCents: 6000 } } };
    const refunds = await held(4, '25 hours');
    const outcomes: string[] = [];
    for (const a of refunds) outcomes.push(await processExecution(a.job, h.deps({ bundles })));
    // two users, two refunds each: each user's second fits 60.00 exactly
    expect(outcomes).toEqual(['succeeded', 'succeeded', 'succeeded', 'succeeded']);
    const more = await held(2, '25 hours');
    for (const a of more) outcomes.push(await processExecution(a.job, h.deps({ bundles })));
    expect(outcomes.slice(4)).toEqual(['reevaluated:DENY:R5', 'reevaluated:DENY:R5']);
    expect(await paidOn([...refunds, ...more].map((a) => a.orderId))).toBe(12_000);
    const sums = await refundSums(h.db, { tenant: 'quillfeather', orderId: 'X-0001', userId: 'rep-ben', includeQueued: true });
    expect(sums).toMatchObject({ user24hCents: 6000, tenant24hCents: 12_000 });
  });
});
