import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { executeRemediation } from '@gatehouse/reconciliation';
import { refundSums } from '@gatehouse/policy';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import { seedRefund, seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// docs/decisions/0686-refunds-outside-steps-count-toward-the-limits.md: money reconciliation finds
// out of the payments ledger — a refund adopted into the ledger, one found without a step, one
// under a failed step, a ratified amount the ledger moved beyond the agent's — counts toward the
// refund limits, once. Real passes and remediations over a real ledger and the staging systems,
// then a refund decision (the executor's re-evaluation of an approved refund).

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, liveItem, approvedRemediation } = reconOps(() => h);

/** Requests `kind` on the live item of `subject`, lets lead-eli approve it (what the approval API writes), and executes it. */
async function remediate(subject: string, kind: 'ratify' | 'adopt' | 'replay') {
  const item = await liveItem(subject);
  await approvedRemediation(item.id, kind);
  return executeRemediation(remediation(), item.id);
}

/** A lead-approved refund of `amountCents` on `orderId`, executed now: the decision is re-evaluated under the limits. */
async function approvedRefund(orderId: string, amountCents: number): Promise<string> {
  const a = await createAction(h.db, { orderId, amountCents, decision: 'REQUIRE_APPROVAL' });
  return processExecution(a.job, h.deps());
}
const paidOut = async (orderId: string) => (await h.refunds(orderId)).reduce((s, r) => s + r.amountCents, 0);
const sums = (orderId: string) => refundSums(h.db, { tenant: 'quillfeather', orderId, userId: 'rep-ana', includeQueued: true });

describe('money out that reconciliation found counts toward the refund limits (ADR 0686)', () => {
  it('after a refund of 400.00 adopted on an order paid 450.00, a refund of 450.00 is denied by R4: nothing more is paid', async () => {
    const orderId = await h.newOrder(45_000);
    const refundId = await seedRefund(h.db, { key: `outside-${randomUUID()}`, orderId, amountCents: 40_000 });
    await pass();
    const adopted = await remediate(`refund:${refundId}`, 'adopt');
    expect(adopted.state).toBe('resolved');

    expect(await approvedRefund(orderId, 45_000)).toBe('reevaluated:DENY:R4');
    // Zero downstream calls: the ledger holds the adopted refund only.
    expect(await h.requests(orderId)).toEqual([]);
    expect(await paidOut(orderId)).toBe(40_000);
    // The order's basis and the tenant's day (the remediation named the order's tenant); not the agent's hour.
    const now = await sums(orderId);
    expect(now.orderCents).toBe(40_000);
    expect(now.tenant24hCents).toBeGreaterThanOrEqual(40_000);
    expect(now.tenant1hCents).toBe(0);
  });

  it('an unexplained ledger entry (no step, not yet remediated) counts as well', async () => {
    const orderId = await h.newOrder(45_000);
    const refundId = await seedRefund(h.db, { key: `outside-${randomUUID()}`, orderId, amountCents: 40_000 });
    await pass();
    expect((await liveItem(`refund:${refundId}`)).class).toBe('ledger_entry_without_step');

    expect(await approvedRefund(orderId, 10_000)).toBe('reevaluated:DENY:R4');
    expect(await h.requests(orderId)).toEqual([]);
    expect(await paidOut(orderId)).toBe(40_000);
  });

  it('a refund under a failed step counts once, and a refund that still fits runs', async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 30_000, opStatus: 'failed' });
    await seedRefund(h.db, { key: step.key, orderId, amountCents: 30_000 });
    await pass();

    expect(await approvedRefund(orderId, 20_000)).toBe('reevaluated:DENY:R4');
    expect(await approvedRefund(orderId, 15_000)).toBe('succeeded');
    expect(await paidOut(orderId)).toBe(45_000);
    expect((await sums(orderId)).orderCents).toBe(45_000);
  });

  it('a ratified amount mismatch counts what the ledger moved when it moved more than the agent asked', async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 5_000, opStatus: 'succeeded' });
    await seedRefund(h.db, { key: step.key, orderId, amountCents: 40_000 });
    await pass();
    expect((await liveItem(`op:${step.key}`)).status).toBe('frozen');
    const ratified = await remediate(`op:${step.key}`, 'ratify');
    expect(ratified.state).toBe('resolved');

    expect(await approvedRefund(orderId, 10_000)).toBe('reevaluated:DENY:R4');
    expect(await h.requests(orderId)).toEqual([]);
    expect(await paidOut(orderId)).toBe(40_000);
    expect((await sums(orderId)).orderCents).toBe(40_000);
  });
});
