import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newKey, startStaging, token, type StagingHarness } from './support/staging.harness.ts';

// An effect's transaction holds one of the pool's connections from the token's spend to its
// commit. Every read the effect makes (the order and its tenant, the customer's address, the
// refund a reversal undoes) goes through that transaction: read through the pool instead, it
// needs a second connection, and as many concurrent effects as the pool has connections each
// wait for one that never frees — the systems of record hang for good (ADR 0786). Here the pool
// has 2 connections and 12 effects of each kind start at once, five times over.

const POOL = 2;
const AT_ONCE = 12;
const ROUNDS = 5;
/** An answer later than this is a hang: the requests are tiny and the machine is local. */
const ANSWER_WITHIN_MS = 20_000;

let h: StagingHarness;
beforeAll(async () => {
  h = await startStaging({ tokenBinding: false, maxConnections: POOL });
});
afterAll(async () => {
  await h?.stop();
});

/** POSTs `body` to `path` with `auth`, answering the status (a hang fails at {@link ANSWER_WITHIN_MS}). */
async function post(path: string, auth: string, body: unknown, key = newKey()): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${h.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${auth}`, 'idempotency-key': key, 'x-fencing-token': '1' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(ANSWER_WITHIN_MS),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('concurrent effects on a pool smaller than their number', () => {
  it('refunds, reships, mail and reversals all answer: no effect waits for a second connection', async () => {
    const [pay, reship, mail, reverse] = await Promise.all([
      token({}),
      token({ aud: 'orders', scope: 'reship:create' }),
      token({ aud: 'mail', scope: 'mail:send' }),
      token({ scope: 'refund:reverse', sub: 'lead-eli' }),
    ]);
    for (let round = 0; round < ROUNDS; round++) {
      const refunds = await Promise.all(
        Array.from({ length: AT_ONCE }, () => post('/ledger/refunds', pay, { orderId: 'O-1001', amountCents: 1, reason: 'pool' })),
      );
      expect(refunds.map((r) => r.status)).toEqual(Array(AT_ONCE).fill(201));
      const others = await Promise.all([
        ...Array.from({ length: AT_ONCE }, () => post('/orders/O-1006/shipments', reship, {})),
        ...Array.from({ length: AT_ONCE }, () => post('/mail/messages', mail, { orderId: 'O-1001', template: 'apology' })),
        ...refunds.map((r) => post(`/ledger/refunds/${String(r.body.refundId)}/reversals`, reverse, { reason: 'pool' })),
      ]);
      expect(others.map((r) => r.status)).toEqual(Array(3 * AT_ONCE).fill(201));
    }
  });
});
