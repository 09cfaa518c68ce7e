import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fc, fixtures, msg, refunds, settled, startHuntStack, submit, waitFor, type HuntStack } from './helpers.ts';

// "Same refund twice" (docs/product/hard-cases.md#same-refund-twice) with the free text written
// in two forms as well as the amount: the model asks for "20.00" with the reason "lid cracked",
// then for 20 with "lid  cracked " (two spaces, a no-break space, a trailing line break) — the
// same refund, which the proposal dedupe must suppress (ADR 0778). Both are under the 5000 auto
// limit, so without it policy alone allows both and the customer is refunded twice.

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

describe('hunt: the same refund with its reason written in another form', () => {
  it('"lid cracked" then "lid  cracked\\u00a0\\n" (and "café" composed, then decomposed): one refund, the repeat suppressed', async () => {
    await fixtures(s, 'H-reworded', [
      fc(['issue_refund', { orderId: 'O-1006', amount: '20.00', reason: 'lid cracked, café' }]),
      fc(['issue_refund', { orderId: 'O-1006', amount: 20, reason: 'lid  cracked,\u00a0cafe\u0301\n' }]),
      msg(),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-reworded', 'refund 20 on O-1006');
    const v = await waitFor(s, token, workflowId, settled, 60_000);
    expect(v.state).toBe('completed');
    expect(v.actions.map((a) => `v${a.version} ${a.status}`)).toEqual(['v1 succeeded', 'v2 suppressed']);
    expect((await refunds(s, 'O-1006')).map((r) => r.amountCents)).toEqual([2000]);
  });
});
