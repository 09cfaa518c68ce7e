import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, createProposal, type SeededAction, type SeededProposal } from '@gatehouse/testing';
import { processProposal, type ProposalDeps } from '@gatehouse/policy-gateway';
import { processExecution } from '@gatehouse/executor';
import { loadActiveBundles, type PolicyBundles } from '../../packages/policy/src/index.ts';
import { AUDIT_HMAC_KEY, RELEASE, startHarness, type Harness } from '../executor/support/harness.ts';

// R10, the tenant's daily refund cap (docs/decisions/0190-tenant-daily-refund-cap.md), on the
// real paths: the gateway's decision on unlocked sums confirmed under the limit locks (ADR 0450),
// and the executor's re-evaluation at execution (ADR 0430), with refunds of one tenant on
// different orders by two users started in the same tick. Whatever the interleaving, the
// tenant's refunds decided (queued) or paid never pass the cap.

const TRIALS = Number(process.env.TENANT_CAP_RACE_TRIALS ?? 15);
const LANES = 8;
/** A small cap: three refunds of 30.00 fit in 100.00, a fourth does not (R7's 50.00 never decides). */
const CAP = 10_000;
const AMOUNT = 3_000;
const USERS = ['rep-ana', 'rep-ben'] as const;

let h: Harness;
let bundles: PolicyBundles;
let deps: ProposalDeps;
let next = 0;

beforeAll(async () => {
  h = await startHarness({ poolSize: 16 });
  const p2 = loadActiveBundles({ support: 'support-p2', change: 'change-c1' });
  bundles = { ...p2, support: { ...p2.support, limits: { ...p2.support.limits, tenantRolling24hCents: CAP } } };
  deps = { db: h.db, relay: h.relay, log: h.log, bundles, stagingUrl: h.stagingUrl, auditHmacKey: AUDIT_HMAC_KEY };
});
afterAll(async () => {
  await h?.close();
});

/** A fresh shipped order of quillfeather/US that paid 500.00, with an id of the tool's form. */
async function newOrder(): Promise<string> {
  const id = `T-${String(1000 + next++).padStart(4, '0')}`;
  await h.staging
    .insertInto('staging.orders')
    .values({ id, tenant: 'quillfeather', region: 'US', customer: 'cust-2', paid_cents: 50_000, status: 'shipped' })
    .execute();
  return id;
}

/**
 * Moves every refund recorded so far out of the tenant's day (and hour), decisions and claims
 * alike (a refund that ran is in the windows from its claim, ADR 0682): the next trial starts from zero.
 */
async function ageEverything(): Promise<void> {
  await sql`UPDATE actions SET created_at = now() - interval '25 hours'`.execute(h.db);
  await sql`UPDATE operations SET created_at = now() - interval '25 hours'`.execute(h.db);
}

describe('R10 under concurrency on the real gateway and executor paths', () => {
  it(`gateway: ${LANES} refunds of one tenant on ${LANES} orders decided in one tick never queue past its daily cap (× ${TRIALS})`, async () => {
    const anomalies: string[] = [];
    for (let t = 0; t < TRIALS; t++) {
      const proposals: SeededProposal[] = [];
      for (let i = 0; i < LANES; i++) {
        const orderId = await newOrder();
        proposals.push(
          await createProposal(h.db, {
            tool: 'issue_refund',
            userId: USERS[i % USERS.length],
            policyRevision: 'support-p2',
            arguments: { orderId, amount: '30.00', reason: 'damaged item' },
          }),
        );
      }
      const settled = await Promise.allSettled(proposals.map((p) => processProposal({ release: RELEASE, ...p }, deps)));
      const outcomes = settled.map((s) => (s.status === 'fulfilled' ? s.value.replace(/:rechecked$/, '') : `error:${String(s.reason)}`));
      const allowed = outcomes.filter((o) => o === 'ALLOW:ALL').length;
      if (allowed !== Math.floor(CAP / AMOUNT) || outcomes.some((o) => o !== 'ALLOW:ALL' && o !== 'DENY:R10'))
        anomalies.push(`trial ${t}: ${outcomes.join(', ')}`);
      await ageEverything();
    }
    expect(anomalies).toEqual([]);
  }, 180_000);

  it(`executor: ${LANES} allowed refunds of one tenant on ${LANES} orders claimed in one tick never pay past its daily cap (× ${TRIALS})`, async () => {
    const anomalies: string[] = [];
    const execDeps = h.deps({ bundles });
    for (let t = 0; t < TRIALS; t++) {
      const seeded: Array<SeededAction & { orderId: string }> = [];
      for (let i = 0; i < LANES; i++) {
        const orderId = await newOrder();
        const a = await createAction(h.db, {
          orderId,
          amountCents: AMOUNT,
          userId: USERS[i % USERS.length],
          decision: 'ALLOW',
          policyRevision: 'support-p2',
        });
        seeded.push({ ...a, orderId });
      }
      const settled = await Promise.allSettled(seeded.map((a) => processExecution(a.job, execDeps)));
      const outcomes = settled.map((s) => (s.status === 'fulfilled' ? s.value : `error:${String(s.reason)}`));
      let paid = 0;
      for (const a of seeded) paid += (await h.refunds(a.orderId)).reduce((sum, r) => sum + r.amountCents, 0);
      const succeeded = outcomes.filter((o) => o === 'succeeded').length;
      if (paid > CAP || succeeded !== Math.floor(CAP / AMOUNT)) anomalies.push(`trial ${t}: paid ${paid}, outcomes ${outcomes.join(', ')}`);
      await ageEverything();
    }
    expect(anomalies).toEqual([]);
  }, 180_000);
});
