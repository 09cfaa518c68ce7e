import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { METRICS, MetricsProbe, startTelemetry, type Telemetry } from '../../packages/telemetry/src/index.ts';
import { auditEvents, RELEASE, startHarness, type Harness } from './support/harness.ts';

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
// The claims made again are counted (gatehouse.limits.rechecks), read through the real SDK.
const probe = new MetricsProbe();
let telemetry: Telemetry;
beforeAll(async () => {
  telemetry = startTelemetry('executor', RELEASE, { spanProcessors: [], metricReaders: [probe] });
  h = await startHarness({ poolSize: 12 });
});
afterAll(async () => {
  await h?.close();
  await telemetry?.shutdown();
});

/**
 * Four ALLOW refunds of 10.00 by `userId` on a fresh order that paid 30.00, each within the
 * limits on its own. Each test has its own rep, so no test spends another's 24 h limit (R5).
 */
async function seedTrial(userId: string): Promise<{ orderId: string; actions: SeededAction[] }> {
  const orderId = await h.newOrder(PAID);
  const actions = await Promise.all(Array.from({ length: LANES }, () => createAction(h.db, { orderId, amountCents: AMOUNT, userId })));
  return { orderId, actions };
}

/** Every lane's execution started in the same tick. */
async function race(actions: SeededAction[], deps = h.deps()): Promise<string[]> {
  const settled = await Promise.allSettled(actions.map((a) => processExecution(a.job, deps)));
  return settled.map((s) => (s.status === 'fulfilled' ? s.value : `error:${String(s.reason)}`));
}

/**
 * Runs up to `trials` races of `userId`'s refunds until one sends the payments ledger more refunds
 * of an order than fit what it paid (the payments ledger's own ceiling may still refuse the last
 * one); returns 1 when one did, else 0.
 */
async function overClaims(userId: string, trials: number, deps = h.deps()): Promise<number> {
  for (let trial = 0; trial < trials; trial++) {
    const { orderId, actions } = await seedTrial(userId);
    await race(actions, deps);
    if ((await h.requests(orderId)).length > PAID / AMOUNT) return 1;
  }
  return 0;
}

describe('executor: the re-evaluation at execution under concurrent claims (ADR 0430)', () => {
  it(`${LANES} concurrent claims on one order never refund more than it paid; the one that no longer fits is re-evaluated, nothing of its grant left (× ${TRIALS})`, async () => {
    const anomalies: string[] = [];
    let reevaluatedTotal = 0;
    for (let trial = 0; trial < TRIALS; trial++) {
      const { orderId, actions } = await seedTrial('rep-ana');
      const outcomes = await race(actions);
      const refunded = (await h.refunds(orderId)).reduce((sum, r) => sum + r.amountCents, 0);
      // the refund that no longer fits never reaches the payments ledger
      const requests = (await h.requests(orderId)).length;
      const succeeded = outcomes.filter((o) => o === 'succeeded').length;
      const reevaluated = outcomes.filter((o) => o.startsWith('reevaluated:')).length;
      reevaluatedTotal += reevaluated;
      if (refunded > PAID || requests !== PAID / AMOUNT || succeeded !== PAID / AMOUNT || reevaluated !== LANES - succeeded)
        anomalies.push(`trial ${trial}: refunded ${refunded} of ${PAID} in ${requests} requests, outcomes ${outcomes.join(', ')}`);
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
    // every re-evaluated refund was a claim rolled back and made again, and is counted as one
    const rechecks = await probe.total(METRICS.limitRechecks.name, { stage: 'claim', tool: 'issue_refund' });
    expect(rechecks).toBeGreaterThanOrEqual(reevaluatedTotal);
    expect(reevaluatedTotal).toBeGreaterThan(0);
    // a claim audited `operation.claimed` for every refund paid, none for a rolled-back grant
    const claimed = await auditEvents(h.db, 'operation.claimed', null);
    const succeeded = await auditEvents(h.db, 'operation.succeeded', null);
    expect(claimed.length).toBe(succeeded.length);
  }, 120_000);

  it('control removed: without the limit locks, concurrent claims send more refunds than the order paid for', async () => {
    const env = process.env.GATEHOUSE_ENV;
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS: '1' });
    resetTestFaultsForTests();
    try {
      expect(await overClaims('rep-ben', 20)).toBe(1);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS;
      if (env === undefined) delete process.env.GATEHOUSE_ENV;
      else process.env.GATEHOUSE_ENV = env;
      resetTestFaultsForTests();
    }
  }, 120_000);

  it('control removed: without the re-evaluation at execution, concurrent claims send more refunds than the order paid for', async () => {
    const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
    expect(await overClaims('rep-cy', 20, deps)).toBe(1);
  }, 120_000);
});

describe('executor: a decision changed since approval, found by the claim (ADR 0430)', () => {
  /** An approved 60.00 refund (R7) by rep-ana on an order that paid only 50.00: the re-evaluation at execution no longer finds R7. */
  async function approvedButChanged(): Promise<SeededAction & { orderId: string }> {
    const orderId = await h.newOrder(5000);
    return { ...(await createAction(h.db, { orderId, amountCents: 6000 })), orderId };
  }

  /** What a rolled-back claim must not leave: a consumed approval, a claim's events, a request downstream. */
  async function expectNothingClaimed(a: SeededAction & { orderId: string }): Promise<void> {
    const approval = await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
    expect(approval.status).not.toBe('used');
    expect(await auditEvents(h.db, 'approval.consumed', a.workflowId)).toEqual([]);
    expect(await auditEvents(h.db, 'operation.claimed', a.workflowId)).toEqual([]);
    expect(await h.requests(a.orderId)).toEqual([]);
    const op = await h.db.selectFrom('operations').select('status').where('action_id', '=', a.actionId).executeTakeFirst();
    expect(op).toBeUndefined();
  }

  it('the approval consumed by the claim is rolled back with it, and the new decision is recorded: zero downstream calls', async () => {
    const a = await approvedButChanged();
    expect(a.approvalId).not.toBeNull();
    expect(await processExecution(a.job, h.deps())).toMatch(/^reevaluated:/);
    await expectNothingClaimed(a);
    const versions = await h.db.selectFrom('actions').select(['version', 'status']).where('workflow_id', '=', a.workflowId).execute();
    expect(versions.length).toBeGreaterThan(1);
  });

  it('a changed decision comes before an expired approval, as when the re-evaluation ran first', async () => {
    const a = await approvedButChanged();
    await h.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 60_000) })
      .where('id', '=', a.approvalId!)
      .execute();
    expect(await processExecution(a.job, h.deps())).toMatch(/^reevaluated:/);
    await expectNothingClaimed(a);
  });
});
