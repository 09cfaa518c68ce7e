import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '@gatehouse/ledger';
import { HELD_CHECK_UNREADABLE, type AdapterCall } from '../src/adapters/adapter.ts';
import { idempotentWrite } from '../src/adapters/idempotent-write.ts';

// A retry after a 429 asks the tool's containment and audit health first (ADRs 0700, 0706). When
// that check cannot be read (the ledger unreachable during the wait), nothing is sent and the step
// is safe to repeat: the first attempt was answered without effect. It must not end `failed`.

let server: Server;
let url: string;
let requests = 0;

beforeAll(async () => {
  // A payments endpoint that asks for a 50 ms wait, then pays.
  server = createServer((_req, res) => {
    requests++;
    if (requests % 2 === 1) {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after-ms': '50' });
      res.end(JSON.stringify({ error: { reason: 'rate_limited' } }));
      return;
    }
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ refundId: 're_1' }));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ledger/refunds`;
});

afterAll(() => new Promise<void>((ok) => server.close(() => ok())));

function call(checks: Pick<AdapterCall, 'heldByContainment' | 'heldByAudit'>): AdapterCall {
  return {
    stagingUrl: url,
    ledger: undefined as unknown as Db,
    workflow: { id: 'wf-1', tenant: 'quillfeather' },
    args: { orderId: 'O-1001', amountCents: 3000, reason: 'damaged' },
    operationKey: 'wf-1:action:1',
    fencingToken: 1,
    token: () => Promise.resolve('token'),
    deadlineMs: Date.now() + 10_000,
    baseline: null,
    ...checks,
  };
}

const write = (c: AdapterCall, downstream: string) =>
  idempotentWrite(c, {
    downstream,
    url,
    body: { orderId: 'O-1001', amountCents: 3000 },
    target: { target: 'O-1001', amountCents: 3000 },
    maxAttempts: 3,
    evidence: (b) => String(b.refundId),
  });

describe('a retry whose held check cannot be read', () => {
  it('is not sent, and the step is safe to repeat (never failed)', async () => {
    requests = 0;
    const unreadable = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const out = await write(call({ heldByContainment: unreadable }), 'payments-unreadable-switch');
    expect(out).toMatchObject({ status: 'retry_safe', reason: HELD_CHECK_UNREADABLE, attempts: 1 });
    expect(requests).toBe(1);
  });

  it('the audit check alike', async () => {
    requests = 0;
    const unreadable = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const out = await write(
      call({ heldByContainment: () => Promise.resolve(false), heldByAudit: unreadable }),
      'payments-unreadable-audit',
    );
    expect(out).toMatchObject({ status: 'retry_safe', reason: HELD_CHECK_UNREADABLE, attempts: 1 });
    expect(requests).toBe(1);
  });

  it('with both checks readable and clear, the retry is sent under the same key and pays once', async () => {
    requests = 0;
    const clear = () => Promise.resolve(false);
    const out = await write(call({ heldByContainment: clear, heldByAudit: clear }), 'payments-clear');
    expect(out).toMatchObject({ status: 'succeeded', evidenceRef: 're_1', attempts: 2 });
    expect(requests).toBe(2);
  });
});
