import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, createProposal, deadlockCount } from '@gatehouse/testing';
import { LeaseBusy, processExecution } from '@gatehouse/executor';
import { processProposal, type ProposalDeps } from '@gatehouse/policy-gateway';
import { AUDIT_HMAC_KEY, BUNDLES, RELEASE, startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0620-the-claim-in-two-statements.md: the claim takes the refund limit locks
// last, in its grant's statement, and the gateway takes them last in its decision (ADR 0450).
// A claim of an ALLOW refund and the gateway's decision of another refund on the same order (its
// own run, its own rep's limits shared) start in the same tick (× TRIALS); the two refunds do not
// both fit what the order paid (R4). Never a deadlock, never an error; the order is never refunded
// more than it paid, and the refund the gateway allows is one that still fits.

const TRIALS = Number(process.env.CLAIM_DECISION_TRIALS ?? 30);
const PAID = 1500;
const AMOUNT = 1000;

let h: Harness;
let deps: ProposalDeps;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12, deadlockTimeoutMs: 20 });
  deps = { db: h.db, relay: h.relay, log: h.log, bundles: BUNDLES, stagingUrl: h.stagingUrl, auditHmacKey: AUDIT_HMAC_KEY };
});
afterAll(async () => {
  await h?.close();
});

describe('a claim against the gateway deciding another refund of the same order (ADR 0620, ADR 0450)', () => {
  it(`${TRIALS} trials: no deadlock, the order never refunded beyond what it paid`, async () => {
    const before = await deadlockCount(h.db, h.tdb.name);
    const anomalies: string[] = [];
    const outcomes = new Map<string, number>();
    for (let i = 0; i < TRIALS; i++) {
      // the tool's order id form (`X-1234`), unique per trial
      const orderId = `C-${1000 + i}`;
      await h.staging
        .insertInto('staging.orders')
        .values({ id: orderId, tenant: 'quillfeather', region: 'US', customer: 'cust-2', paid_cents: PAID, status: 'shipped' })
        .execute();
      const a = await createAction(h.db, { orderId, amountCents: AMOUNT, budgetMs: 600_000 });
      const p = await createProposal(h.db, {
        tool: 'issue_refund',
        arguments: { orderId, amount: (AMOUNT / 100).toFixed(2), reason: 'damaged item' },
      });
      const [exec, decided] = await Promise.allSettled([
        processExecution(a.job, h.deps()),
        processProposal({ release: RELEASE, ...p }, deps),
      ]);
      const key = `${exec.status === 'fulfilled' ? exec.value : String(exec.reason)} | ${decided.status === 'fulfilled' ? decided.value : String(decided.reason)}`;
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
      if (exec.status === 'rejected' && !(exec.reason instanceof LeaseBusy))
        anomalies.push(`trial ${i}: execution threw ${String(exec.reason)}`);
      if (decided.status === 'rejected') anomalies.push(`trial ${i}: decision threw ${String(decided.reason)}`);
      const refunds = await h.refunds(orderId);
      const refunded = refunds.reduce((s, r) => s + r.amountCents, 0);
      // what is still queued to run: approved ALLOW refunds of the order not yet claimed
      const queued = await h.db
        .selectFrom('actions')
        .select(['id', 'status', 'decision'])
        .where('target', '=', orderId)
        .where('status', '=', 'approved')
        .execute();
      const queuedCents = queued.length * AMOUNT;
      if (refunded + queuedCents > PAID) anomalies.push(`trial ${i}: refunded ${refunded} + queued ${queuedCents} > paid ${PAID} (${key})`);
    }
    if (process.env.RACE_VERBOSE) console.info(JSON.stringify([...outcomes]));
    expect(anomalies).toEqual([]);
    expect(await deadlockCount(h.db, h.tdb.name)).toBe(before);
  }, 180_000);
});
