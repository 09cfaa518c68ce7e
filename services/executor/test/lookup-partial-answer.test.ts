import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { answerJson, startInterceptingProxy, type InterceptingProxy } from '@gatehouse/test-harness';
import { processExecution, type ExecutionDeps } from '../src/jobs/executions.processor.ts';
import { startHarness, type Harness } from '../../../test/executor/support/harness.ts';

// `lookup_order` reads three records: the order, its shipments and its refunds. When the order
// answers but one of the other two does not (a 5xx, or a 200 without its list), the read is
// partial: reporting it as "0 shipments" or "refunded 0.00" tells the model and the rep something
// the systems of record never said. A partial read is no read: it is tried again and, if the
// listing stays down, fails `order_system_unavailable` (docs/decisions/0771-a-partial-order-read-is-no-read.md).
// Real ledger and staging, behind a proxy that fails the chosen listing.

let h: Harness;
let deps: ExecutionDeps;
let proxy: InterceptingProxy;
/** Which listing the proxy fails, and how: a 503, or a 200 body without its list. */
let failing: { path: RegExp; mode: '503' | 'empty' } | null = null;

beforeAll(async () => {
  h = await startHarness();
  proxy = await startInterceptingProxy(h.stagingUrl, (req, res) =>
    req.method === 'GET' && failing !== null && failing.path.test(req.url ?? '')
      ? answerJson(
          res,
          failing.mode === '503' ? 503 : 200,
          failing.mode === '503' ? { error: { reason: 'server_error', message: 'test proxy' } } : {},
        )
      : false,
  );
  deps = h.deps({ stagingUrl: proxy.url });
});
afterAll(async () => {
  await proxy?.close();
  await h?.close();
});

/** A shipped order with one refund of 30.00 and one shipment already recorded by the systems of record. */
async function orderWithHistory(): Promise<string> {
  const orderId = await h.newOrder();
  const refund = await createAction(h.db, { orderId, amountCents: 3000 });
  expect(await processExecution(refund.job, h.deps())).toBe('succeeded');
  const reship = await createAction(h.db, { tool: 'reship_order', orderId });
  expect(await processExecution(reship.job, h.deps())).toBe('succeeded');
  return orderId;
}

async function lookup(orderId: string) {
  const a = await createAction(h.db, { tool: 'lookup_order', orderId, decision: 'ALLOW' });
  const outcome = await processExecution(a.job, deps);
  const op = await h.db
    .selectFrom('operations')
    .select(['status', 'result', 'error'])
    .where('key', '=', a.operationKey)
    .executeTakeFirstOrThrow();
  return { outcome, op };
}

describe('lookup_order when the systems of record answer only in part', () => {
  it('reads back the order, its shipments and refunds when all answer', async () => {
    failing = null;
    const { outcome, op } = await lookup(await orderWithHistory());
    expect(outcome).toBe('succeeded');
    expect(op.result).toMatchObject({ refunded: '30.00', shipments: 1 });
  });

  it('a refund the payments ledger reversed is not reported as refunded (the ledger nets it out, as policy does)', async () => {
    failing = null;
    const orderId = await orderWithHistory();
    const second = await createAction(h.db, { orderId, amountCents: 2000, reason: 'second' });
    expect(await processExecution(second.job, h.deps())).toBe('succeeded');
    const [first] = await h.refunds(orderId);
    await h.staging
      .insertInto('staging.refund_reversals')
      .values({
        reversal_id: `rv_test_${orderId}`,
        refund_id: first!.refundId,
        idempotency_key: `reverse:${first!.refundId}`,
        order_id: orderId,
        tenant: 'quillfeather',
        amount_cents: first!.amountCents,
        reason: 'duplicate',
        requester: 'lead-eli',
        actor: 'reconciliation',
      })
      .execute();
    const { outcome, op } = await lookup(orderId);
    expect(outcome).toBe('succeeded');
    expect(op.result).toMatchObject({ refunded: '20.00' });
  });

  for (const [what, path] of [
    ['the reversals listing', /^\/ledger\/reversals\?/],
    ['the payments ledger', /^\/ledger\/refunds\?/],
    ['the shipments listing', /^\/orders\/[^/]+\/shipments$/],
  ] as const) {
    for (const mode of ['503', 'empty'] as const) {
      it(`${what} answering ${mode === '503' ? '503' : 'a 200 without its list'}: never "none", the read fails`, async () => {
        const orderId = await orderWithHistory();
        failing = { path, mode };
        try {
          const { outcome, op } = await lookup(orderId);
          expect(op.result ?? {}).not.toMatchObject({ refunded: '0.00' });
          expect(op.result ?? {}).not.toMatchObject({ shipments: 0 });
          expect(outcome).toBe('failed');
          expect(String(op.error ?? JSON.stringify(op.result))).toMatch(/order_system_unavailable/);
        } finally {
          failing = null;
        }
      });
    }
  }
});
