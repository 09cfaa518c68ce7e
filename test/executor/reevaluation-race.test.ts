import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { auditEvents, startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0430-limit-locks-last-in-the-claim.md: a first claim re-evaluates the policy
// last, after its grant, under the limit locks. Refunds allowed one by one whose sum exceeds what
// the order paid are claimed together: the re-evaluation of each must see the claims committed
// before it, so the order is never refunded more than it paid (R4), and the refund that no longer
// fits is re-evaluated with nothing of its grant left behind.

const TRIALS = Number(process.env.REEVALUATION_TRIALS ?? 25);
const LANES = 4;
const PAID = 3000;
const AMOUNT = 1000;

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12 });
});
afterAll(async () => {
  await h?.close();
});

/** Four ALLOW refunds of 10.00 on a fresh order that paid 30.00, each within the limits on its own. */
async function seedTrial(): Promise<{ orderId: string; actions: SeededAction[] }> {
  const orderId = await h.newOrder(PAID);
  const actions = await Promise.all(Array.from({ length: LANES }, () => createAction(h.db, { orderId, amountCents: AMOUNT })));
  return { orderId, actions };
}

/** Every lane's execution started in the same tick. */
async function race(actions: SeededAction[]): Promise<string[]> {
  const settled = await Promise.allSettled(actions.map((a) => processExecution(a.job, h.deps())));
  return settled.map((s) => (s.status === 'fulfilled' ? s.value : `error:${String(s.reason)}`));
}

describe('executor: the re-evaluation at execution under concurrent claims (ADR 0430)', () => {
  it(`${LANES} concurrent claims on one order never refund more than it paid; the one that no longer fits is re-evaluated, nothing of its grant left (× ${TRIALS})`, async () => {
    const anomalies: string[] = [];
    for (let trial = 0; trial < TRIALS; trial++) {
      const { orderId, actions } = await seedTrial();
      const outcomes = await race(actions);
      const refunded = (await h.refunds(orderId)).reduce((sum, r) => sum + r.amountCents, 0);
      const succeeded = outcomes.filter((o) => o === 'succeeded').length;
      const reevaluated = outcomes.filter((o) => o.startsWith('reevaluated:')).length;
      if (refunded > PAID || succeeded !== PAID / AMOUNT || reevaluated !== LANES - succeeded)
        anomalies.push(`trial ${trial}: refunded ${refunded} of ${PAID}, outcomes ${outcomes.join(', ')}`);
      // the re-evaluated action kept no lease and no running mark: its rolled-back grant left nothing
      const stale = await h.db
        .selectFrom('operations')
        .select(['key', 'status', 'fencing_token'])
        .where(
          'action_id',
          'in',
          actions.map((a) => a.actionId),
        )
        .where('status', '!=', 'succeeded')
        .execute();
      if (stale.length) anomalies.push(`trial ${trial}: operations left ${JSON.stringify(stale)}`);
    }
    expect(anomalies).toEqual([]);
    // a claim audited `operation.claimed` for every refund paid, none for a rolled-back grant
    const claimed = await auditEvents(h.db, 'operation.claimed', null);
    const succeeded = await auditEvents(h.db, 'operation.succeeded', null);
    expect(claimed.length).toBe(succeeded.length);
  }, 120_000);

  it('control removed: without the limit locks, concurrent claims refund an order more than it paid', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS: '1' });
    resetTestFaultsForTests();
    try {
      let over = 0;
      for (let trial = 0; trial < 30 && over === 0; trial++) {
        const { orderId, actions } = await seedTrial();
        await race(actions);
        const refunded = (await h.refunds(orderId)).reduce((sum, r) => sum + r.amountCents, 0);
        if (refunded > PAID) over++;
      }
      expect(over).toBeGreaterThan(0);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS;
      resetTestFaultsForTests();
    }
  }, 120_000);
});
