import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { createAction, createProposal, type SeededProposal } from '@gatehouse/testing';
import { processProposal, type ProposalDeps } from '@gatehouse/policy-gateway';
import { METRICS, MetricsProbe, startTelemetry, type Telemetry } from '../../packages/telemetry/src/index.ts';
import { AUDIT_HMAC_KEY, BUNDLES, RELEASE, startHarness, type Harness } from '../executor/support/harness.ts';

// docs/decisions/0450-limit-locks-last-in-the-decision.md: the gateway decides a refund on sums
// read without the limit locks, writes the decision, and checks it again last under the locks.
// Eight refunds on one order, each of which fits alone and together exceed the auto limit, are
// decided in the same tick: the check under the locks must see every decision committed before it,
// so exactly one runs without approval (R7's cumulative basis), and each decision that no longer
// holds is rolled back whole and made again under the locks.

const TRIALS = Number(process.env.DECISION_RACE_TRIALS ?? 25);
const LANES = 8;
const PAID = 10_000;

let h: Harness;
let deps: ProposalDeps;
// The decisions made again are counted (gatehouse.limits.rechecks), read through the real SDK.
const probe = new MetricsProbe();
let telemetry: Telemetry;
beforeAll(async () => {
  telemetry = startTelemetry('policy-gateway', RELEASE, { spanProcessors: [], metricReaders: [probe] });
  h = await startHarness({ poolSize: 16 });
  deps = { db: h.db, relay: h.relay, log: h.log, bundles: BUNDLES, stagingUrl: h.stagingUrl, auditHmacKey: AUDIT_HMAC_KEY };
});
afterAll(async () => {
  await h?.close();
  await telemetry?.shutdown();
});

/** A fresh order of quillfeather in `region` that paid {@link PAID}; `id` must match the tool's order id form (`X-1234`). */
async function newOrder(id: string, region = 'US'): Promise<string> {
  await h.staging
    .insertInto('staging.orders')
    .values({ id, tenant: 'quillfeather', region, customer: 'cust-2', paid_cents: PAID, status: 'shipped' })
    .execute();
  return id;
}

/** `n` runs of `userId`, each proposing one refund of `amount` (as the model sent it) on `orderIds[i % length]`. */
function propose(n: number, userId: string, orderIds: string[], amount: string): Promise<SeededProposal[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      createProposal(h.db, {
        tool: 'issue_refund',
        userId,
        arguments: { orderId: orderIds[i % orderIds.length], amount, reason: 'damaged item' },
      }),
    ),
  );
}

/** Every proposal decided in the same tick; the outcomes in order. */
async function race(proposals: SeededProposal[]): Promise<string[]> {
  const settled = await Promise.allSettled(proposals.map((p) => processProposal({ release: RELEASE, ...p }, deps)));
  return settled.map((s) => (s.status === 'fulfilled' ? s.value : `error:${String(s.reason)}`));
}

/** What each run kept of its decisions: action rows, decision_log rows, `policy.decision` events and outbox rows. */
async function leftovers(proposals: SeededProposal[]): Promise<string[]> {
  const ids = proposals.map((p) => p.workflowId);
  const count = async (table: 'actions' | 'decision_log', column: 'workflow_id') =>
    Number(
      (
        await h.db
          .selectFrom(table)
          .select(sql<string>`count(*)`.as('n'))
          .where(column, 'in', ids)
          .executeTakeFirstOrThrow()
      ).n,
    );
  const events = await h.db
    .selectFrom('audit_outbox')
    .select(sql<string>`count(*)`.as('n'))
    .where(sql<boolean>`event->>'type' = 'policy.decision' and event->>'runId' = any(${ids})`)
    .executeTakeFirstOrThrow();
  const jobs = await h.db
    .selectFrom('outbox')
    .select(sql<string>`count(*)`.as('n'))
    .where(sql<boolean>`payload->>'workflowId' = any(${ids})`)
    .executeTakeFirstOrThrow();
  const found = {
    actions: await count('actions', 'workflow_id'),
    decisions: await count('decision_log', 'workflow_id'),
    events: Number(events.n),
    jobs: Number(jobs.n),
  };
  return Object.entries(found)
    .filter(([, n]) => n !== proposals.length)
    .map(([what, n]) => `${what}: ${n} for ${proposals.length} proposals`);
}

const bare = (o: string) => o.replace(/:rechecked$/, '');

describe('policy gateway: refund decisions confirmed under the limit locks (ADR 0450)', () => {
  it(`${LANES} concurrent refunds on one order: exactly one runs without approval; the decisions that no longer hold are rolled back and made again (× ${TRIALS})`, async () => {
    const anomalies: string[] = [];
    let rechecked = 0;
    for (let trial = 0; trial < TRIALS; trial++) {
      const orderId = await newOrder(`R-${1000 + trial}`);
      // 30.00 each: one fits the auto limit (50.00), two do not.
      const proposals = await propose(LANES, 'rep-ana', [orderId], '30.00');
      const outcomes = await race(proposals);
      rechecked += outcomes.filter((o) => o.endsWith(':rechecked')).length;
      const allowed = outcomes.filter((o) => bare(o) === 'ALLOW:ALL').length;
      const held = outcomes.filter((o) => bare(o) === 'REQUIRE_APPROVAL:R7').length;
      if (allowed !== 1 || held !== LANES - 1) anomalies.push(`trial ${trial}: ${outcomes.join(', ')}`);
      // a rolled-back decision left nothing: one action, decision, event and job per proposal
      anomalies.push(...(await leftovers(proposals)).map((l) => `trial ${trial}: ${l}`));
      const queued = await h.db
        .selectFrom('actions')
        .select(sql<string>`count(*)`.as('n'))
        .where('target', '=', orderId)
        .where('status', '=', 'approved')
        .executeTakeFirstOrThrow();
      if (Number(queued.n) !== 1) anomalies.push(`trial ${trial}: ${queued.n} refunds queued without approval`);
      // out of the rolling windows, so the trials do not add up in R5 and R6
      await h.db
        .updateTable('actions')
        .set({ created_at: new Date(Date.now() - 25 * 3_600_000) })
        .where('target', '=', orderId)
        .execute();
    }
    expect(anomalies).toEqual([]);
    // the rolled-back path is taken: the decisions made on sums read before the first commit
    expect(rechecked).toBeGreaterThan(0);
    // and each is counted once, by stage and tool, for operators to see limits competed for
    expect(await probe.total(METRICS.limitRechecks.name, { stage: 'decision', tool: 'issue_refund' })).toBe(rechecked);
  });

  it("refunds of one user on different orders compete for the user's day only: one fits, the other is denied (R5)", async () => {
    // rep-eva (EU) starts the day at 980.00 of the 1,000.00 R5 allows: 15.00 fits once, on any order.
    const seeded = await createAction(h.db, { orderId: await newOrder('E-1000', 'EU'), amountCents: 98_000, userId: 'rep-eva' });
    await h.db.updateTable('actions').set({ status: 'succeeded' }).where('id', '=', seeded.actionId).execute();
    const orders = await Promise.all([1001, 1002, 1003, 1004].map((n) => newOrder(`E-${n}`, 'EU')));
    const outcomes = await race(await propose(4, 'rep-eva', orders, '15.00'));
    expect(outcomes.map(bare).sort(), outcomes.join(', ')).toEqual(['ALLOW:ALL', 'DENY:R5', 'DENY:R5', 'DENY:R5']);
  });

  it('control removed: without the check under the locks, concurrent refunds on one order dodge the auto limit', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_DECISION_RECHECK: '1' });
    resetTestFaultsForTests();
    try {
      let dodged = 0;
      for (let trial = 0; trial < 20 && dodged === 0; trial++) {
        const orderId = await newOrder(`U-${1000 + trial}`);
        const outcomes = await race(await propose(LANES, 'rep-ben', [orderId], '30.00'));
        if (outcomes.filter((o) => o === 'ALLOW:ALL').length > 1) dodged++;
      }
      expect(dodged).toBeGreaterThan(0);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_DECISION_RECHECK;
      resetTestFaultsForTests();
    }
  });
});
