import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, deadlockCount, type SeededAction } from '@gatehouse/testing';
import { LeaseBusy, processExecution } from '@gatehouse/executor';
import { auditEvents, startHarness, type Harness } from './support/harness.ts';

// docs/product/hard-cases.md#duplicate-delivery: delivered to two workers at once behind a
// barrier, one lease, one downstream call, both deliveries get the original outcome; here with
// 2, 4 and 8 executors, 200 trials each.
// Every trial is a fresh approved action; all N executions start in the same tick.

const TRIALS = Number(process.env.BARRIER_TRIALS ?? 200);

let h: Harness;
let orderId: string;
beforeAll(async () => {
  // deadlock_timeout 20 ms instead of 1 s: the lock-order bug below (every deadlock stalls the
  // trial for deadlock_timeout) would otherwise push 600 trials far beyond the CI budget.
  h = await startHarness({ poolSize: 12, deadlockTimeoutMs: 20 });
  orderId = await h.newOrder();
});
afterAll(async () => {
  await h?.close();
});

/** Creates `n` actions, a few at a time. */
async function seed(n: number): Promise<SeededAction[]> {
  const out: SeededAction[] = [];
  for (let i = 0; i < n; i += 20) {
    out.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(20, n - i) }, () => createAction(h.db, { orderId, amountCents: 6000, budgetMs: 600_000 })),
      )),
    );
  }
  return out;
}

function countBy<T>(xs: T[], key: (x: T) => string): Map<string, number> {
  const m = new Map<string, number>();
  for (const x of xs) m.set(key(x), (m.get(key(x)) ?? 0) + 1);
  return m;
}

describe('executor: barrier race (exactly one effect)', () => {
  it.each([2, 4, 8])(
    `%i concurrent executions of one approved action, ${TRIALS} trials: one lease, one refund, fence 1, approval used once`,
    async (n) => {
      const actions = await seed(TRIALS);
      // The policy re-evaluation at execution is switched off (test hook): 600 approved refunds of
      // one user would, correctly, hit the rolling caps (R4/R5) long before the last trial, and the
      // race under test is the claim's, not the policy's.
      const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
      const anomalies: string[] = [];
      for (const [i, a] of actions.entries()) {
        const settled = await Promise.allSettled(Array.from({ length: n }, () => processExecution(a.job, deps)));
        const won = settled.filter((s) => s.status === 'fulfilled' && s.value === 'succeeded').length;
        const other = settled.filter(
          (s) =>
            !(s.status === 'fulfilled' && (s.value === 'succeeded' || s.value === 'replay:succeeded')) &&
            !(s.status === 'rejected' && s.reason instanceof LeaseBusy),
        );
        if (won !== 1 || other.length)
          anomalies.push(
            `trial ${i}: ${won} winners, unexpected ${JSON.stringify(other.map((s) => (s.status === 'fulfilled' ? s.value : String(s.reason))))}`,
          );
        // a redelivery after the race collects the stored outcome
        const after = await processExecution(a.job, deps);
        if (after !== 'replay:succeeded') anomalies.push(`trial ${i}: redelivery got ${after}`);
      }
      expect(anomalies).toEqual([]);

      const keys = actions.map((a) => a.operationKey);
      // systems of record: one refund per key, written under fencing token 1, one request per key
      const refunds = await h.staging
        .selectFrom('staging.refunds')
        .select(['idempotency_key', 'fencing_token'])
        .where('idempotency_key', 'in', keys)
        .execute();
      expect(refunds).toHaveLength(TRIALS);
      expect(new Set(refunds.map((r) => r.idempotency_key)).size).toBe(TRIALS);
      expect(refunds.filter((r) => Number(r.fencing_token) !== 1)).toEqual([]);
      const calls = await h.staging
        .selectFrom('staging.request_log')
        .select(['idempotency_key', 'status'])
        .where('idempotency_key', 'in', keys)
        .execute();
      const perKey = countBy(calls, (c) => c.idempotency_key ?? '');
      expect([...perKey.values()].filter((c) => c !== 1)).toEqual([]);
      expect(perKey.size).toBe(TRIALS);
      expect(calls.every((c) => c.status === 201)).toBe(true);

      // ledger: one lease granted per operation, approval consumed exactly once
      const ops = await h.db
        .selectFrom('operations')
        .select(['key', 'status', 'fencing_token', 'attempts'])
        .where('key', 'in', keys)
        .execute();
      expect(ops.filter((o) => o.status !== 'succeeded' || o.fencing_token !== '1' || o.attempts !== 1)).toEqual([]);
      const approvals = await h.db
        .selectFrom('approvals')
        .select(['id', 'status'])
        .where(
          'action_id',
          'in',
          actions.map((a) => a.actionId),
        )
        .execute();
      expect(approvals.filter((p) => p.status !== 'used')).toEqual([]);
      const ids = new Set(actions.map((a) => a.approvalId));
      const consumed = (await auditEvents(h.db, 'approval.consumed', null)).filter((e) => ids.has(e.approvalId as string));
      const consumedPer = countBy(consumed, (e) => String(e.approvalId));
      expect(consumedPer.size).toBe(TRIALS);
      expect([...consumedPer.values()].filter((c) => c !== 1)).toEqual([]);
      const claimed = (await auditEvents(h.db, 'operation.claimed', null)).filter((e) => ids.has(e.approvalId as string));
      expect(claimed).toHaveLength(TRIALS);
    },
    180_000, // headroom on a loaded 2-core machine (about 35 s here)
  );

  // Regression: every transaction takes row locks in one order (workflows → actions →
  // operations → approvals), so a redelivery claiming while the winner records cannot deadlock.
  it('concurrent deliveries of one action never deadlock the ledger', async () => {
    const before = await deadlockCount(h.db, h.tdb.name);
    const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
    for (const a of await seed(40)) {
      await Promise.allSettled(Array.from({ length: 8 }, () => processExecution(a.job, deps)));
    }
    let after = before;
    for (let i = 0; i < 30 && after === before; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = await deadlockCount(h.db, h.tdb.name);
    }
    if (process.env.TEST_LOG_LEVEL) console.info(`deadlocks in 40 trials of 8: ${after - before}`);
    expect(after - before).toBe(0);
  });
});
