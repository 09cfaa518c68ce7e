import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fault, fc, fixtures, msg, refunds, settled, startHuntStack, submit, waitFor, type HuntStack } from '../hard-cases/helpers.ts';

// The two layers of duplicate suppression, removed one at a time (issue #17,
// docs/decisions/0140-more-control-removed-switches.md), through every service as a process. One
// ticket holds both kinds of duplicate: the model asks for "20.00" on an order, then for 20 on it
// again (a repeated proposal — below the 5000 auto limit, so policy alone would allow both), and
// the payments ledger commits the first attempt and loses its response (a retried attempt).
// - the proposal dedupe (gateway) makes the repeated proposal one action;
// - the idempotency key (executor → payments ledger) makes the attempts of one action one refund.
// Each layer guards its own duplicate: removing either alone pays twice; removing both, three times.

let designed: HuntStack;
let off: HuntStack;
beforeAll(async () => {
  [designed, off] = await Promise.all([
    startHuntStack(),
    startHuntStack({ GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE: '1', GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY: '1' }),
  ]);
});
afterAll(async () => {
  await Promise.all([designed?.close(), off?.close()]);
});

/** Runs the doubled ticket on `orderId` and returns the amounts the payments ledger holds for it. */
async function doubledRefund(s: HuntStack, ticketId: string, orderId: string): Promise<{ paid: number[]; statuses: string[] }> {
  await fault(s, { target: 'payments', mode: 'commit_then_lose_response', times: 1 });
  await fixtures(s, ticketId, [
    fc(['issue_refund', { orderId, amount: '20.00', reason: 'late' }]),
    fc(['issue_refund', { orderId, amount: 20, reason: 'late' }]),
    msg(),
  ]);
  const { token, workflowId } = await submit(s, 'rep-ana', ticketId, `refund 20 on ${orderId}`);
  const v = await waitFor(s, token, workflowId, settled, 60_000);
  expect(v.state).toBe('completed');
  return {
    paid: (await refunds(s, orderId)).map((r) => r.amountCents),
    statuses: v.actions.map((a) => `v${a.version} ${a.status}`),
  };
}

describe('control: two layers of duplicate suppression', () => {
  it('designed (both layers): the repeat is suppressed and the retry replayed — one refund', async () => {
    const r = await doubledRefund(designed, 'D-both', 'O-1006');
    expect(r.statuses).toEqual(['v1 succeeded', 'v2 suppressed']);
    expect(r.paid).toEqual([2000]);
  });

  it('both removed: three refunds (the retry pays again, the repeat pays too)', async () => {
    const r = await doubledRefund(off, 'D-none', 'O-1006');
    expect(r.statuses).toEqual(['v1 succeeded', 'v2 succeeded']);
    expect(r.paid).toEqual([2000, 2000, 2000]);
  });

  it('proposal dedupe removed, key kept: the repeat is a second action — two refunds', { timeout: 400_000 }, async () => {
    await off.stack.restart('executor', { GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY: '' });
    const r = await doubledRefund(off, 'D-key-only', 'O-1007');
    expect(r.statuses).toEqual(['v1 succeeded', 'v2 succeeded']);
    expect(r.paid).toEqual([2000, 2000]);
  });

  it('key removed, proposal dedupe kept: the lost response is paid twice — two refunds', { timeout: 400_000 }, async () => {
    await off.stack.restart('executor', { GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY: '1' });
    await off.stack.restart('policy-gateway', { GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE: '' });
    const r = await doubledRefund(off, 'D-dedupe-only', 'O-1008');
    expect(r.statuses).toEqual(['v1 succeeded', 'v2 suppressed']);
    expect(r.paid).toEqual([2000, 2000]);
  });
});
