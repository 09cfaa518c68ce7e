import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answerJson, startInterceptingProxy, type InterceptingProxy } from '@gatehouse/test-harness';
import { readSnapshot, ReadBackUnavailable } from '@gatehouse/reconciliation';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';

// A reconciliation pass classifies nothing on half the data: a read-back that fails is
// `ReadBackUnavailable` (the CLI's exit 4 naming the systems of record, the next pass retries).
// The paged ledger listings were checked for a whole list; the per-order shipments and mail
// listings were not: a 200 without its list, or with an entry that names no shipment, crashed the
// pass with a TypeError (exit 1, "failed") or read an entry with no id and no time as a shipment.
// Real ledger and staging, behind a proxy that answers the chosen listing in part
// (docs/decisions/0773-a-partial-read-back-stops-the-pass.md).

let h: Harness;
let proxy: InterceptingProxy;
/** The listing the proxy answers in part (a path pattern) and the 200 body it answers instead. */
let partial: { path: RegExp; body: unknown } | null = null;

beforeAll(async () => {
  h = await startHarness();
  proxy = await startInterceptingProxy(h.stagingUrl, (req, res) =>
    req.method === 'GET' && partial !== null && partial.path.test(req.url ?? '') ? answerJson(res, 200, partial.body) : false,
  );
});
afterAll(async () => {
  await proxy?.close();
  await h?.close();
});

const snapshot = () => readSnapshot(h.db, proxy.url, { autoApproveLimitCents: 5000, timeoutMs: 5000 });

describe('a reconciliation snapshot whose read-back answers only in part', () => {
  it('reads whole listings', async () => {
    partial = null;
    const s = await snapshot();
    expect(s.shipments.get('O-1002')).toEqual(expect.any(Array));
  });

  const cases: Array<[string, RegExp, unknown]> = [
    ['a shipments listing without its list', /^\/orders\/O-1002\/shipments$/, {}],
    ['a shipments listing whose entry is null', /^\/orders\/O-1002\/shipments$/, { shipments: [null] }],
    ['a shipment with no id and no time', /^\/orders\/O-1002\/shipments$/, { shipments: [{}] }],
    ['a mail listing without its list', /^\/mail\/messages\?/, { error: 'partial' }],
    // The time-windowed listings (ADR 0791): an entry that names no order cannot be judged.
    ['a shipments window listing whose entry names no order', /^\/shipments\?/, { shipments: [{ shipmentId: 'shp_x' }], next: null }],
    ['a mail window listing whose entry names no order', /^\/mail\/messages\?since=/, { messages: [{ messageId: 'msg_x' }], next: null }],
  ];
  for (const [what, path, body] of cases) {
    it(`${what}: ReadBackUnavailable, nothing classified`, async () => {
      // A mail step of unknown outcome makes the pass read that order's mail.
      if (path.source.includes('mail'))
        await seedStep(h.db, { tool: 'notify_customer', orderId: await h.newOrder(), opStatus: 'failed_unknown' });
      partial = { path, body };
      try {
        await expect(snapshot()).rejects.toBeInstanceOf(ReadBackUnavailable);
      } finally {
        partial = null;
      }
    });
  }
});
