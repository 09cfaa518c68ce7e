import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '@gatehouse/ledger';
import { HELD_CHECK_UNREADABLE, type AdapterCall } from '../src/adapters/adapter.ts';
import { idempotentWrite } from '../src/adapters/idempotent-write.ts';

// Retries of one idempotent write against a scripted payments endpoint:
// - a 429 with Retry-After gets one bounded retry under the same key
//   (docs/decisions/0753-a-429-gets-one-retry.md): a second 429 ends the write, however
//   many attempts the downstream's policy allows for 5xx and lost responses;
// - a retry after a 429 asks the tool's containment and audit health first (ADRs 0700, 0706). When
//   that check cannot be read (the ledger unreachable during the wait), nothing is sent and the step
//   is safe to repeat: the first attempt was answered without effect. It must not end `failed`.

let server: Server;
let url: string;
/** What the endpoint answers, in order; the last repeats (0: the connection is dropped unanswered). */
let script: number[] = [];
let seen: Array<{ status: number; key: string; atMs: number }> = [];
/** The `Retry-After` a 503 carries (seconds), none when undefined. */
let retryAfter503: string | undefined;

beforeAll(async () => {
  server = createServer((req, res) => {
    const status = script[Math.min(seen.length, script.length - 1)]!;
    seen.push({ status, key: String(req.headers['idempotency-key']), atMs: Date.now() });
    if (status === 0) return void req.socket.destroy();
    const headers = {
      'content-type': 'application/json',
      ...(status === 429 ? { 'retry-after-ms': '20' } : {}),
      ...(status === 503 && retryAfter503 !== undefined ? { 'retry-after': retryAfter503 } : {}),
    };
    res.writeHead(status, headers);
    res.end(JSON.stringify(status === 201 ? { refundId: 're_1' } : { error: { reason: status === 429 ? 'rate_limited' : 'unavailable' } }));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ledger/refunds`;
});

afterAll(() => new Promise<void>((ok) => server.close(() => ok())));

/**
 * One idempotent write of 30.00 allowing 4 attempts, through a breaker of its own (`downstream`);
 * containment and audit health clear unless `checks` says otherwise.
 */
function write(downstream: string, checks: Pick<AdapterCall, 'heldByContainment' | 'heldByAudit' | 'runDeadlineMs'> = {}) {
  const call: AdapterCall = {
    stagingUrl: url,
    ledger: undefined as unknown as Db,
    workflow: { id: 'wf-1', tenant: 'quillfeather' },
    args: { orderId: 'O-1001', amountCents: 3000, reason: 'damaged' },
    operationKey: 'wf-1:action:1',
    fencingToken: 1,
    token: () => Promise.resolve('token'),
    deadlineMs: Date.now() + 10_000,
    baseline: null,
    heldByContainment: () => Promise.resolve(false),
    heldByAudit: () => Promise.resolve(false),
    ...checks,
  };
  return idempotentWrite(call, {
    downstream,
    url,
    body: { orderId: 'O-1001', amountCents: 3000 },
    target: { target: 'O-1001', amountCents: 3000 },
    maxAttempts: 4,
    evidence: (b) => String(b.refundId),
  });
}

describe('a 429 gets one retry', () => {
  it('429 then 201: retried once under the same key, paid', async () => {
    [script, seen] = [[429, 201], []];
    expect(await write('payments-429-once')).toMatchObject({ status: 'succeeded', evidenceRef: 're_1', attempts: 2 });
    expect(seen.map((s) => s.status)).toEqual([429, 201]);
    expect(new Set(seen.map((s) => s.key))).toEqual(new Set(['wf-1:action:1']));
  });

  it('429 twice: the write ends rate_limited after one retry, not at the attempt limit', async () => {
    [script, seen] = [[429], []];
    expect(await write('payments-429-twice')).toEqual({ status: 'failed', reason: 'rate_limited', retryable: true, attempts: 2 });
    expect(seen.map((s) => s.status)).toEqual([429, 429]);
  });

  it('a 5xx between is retried as a 5xx; the second 429 still ends the write', async () => {
    [script, seen] = [[429, 503, 429, 201], []];
    expect(await write('payments-429-5xx')).toMatchObject({ status: 'failed', reason: 'rate_limited', attempts: 3 });
    expect(seen.map((s) => s.status)).toEqual([429, 503, 429]);
  });
});

describe("the run's deadline bounds the retries (ADR 0772)", () => {
  it('a 5xx storm whose run deadline has just passed: the admitted attempt only, no retry sent', async () => {
    [script, seen] = [[503], []];
    const out = await write('payments-run-deadline-5xx', { runDeadlineMs: Date.now() });
    expect(out).toEqual({ status: 'failed', reason: 'deadline', retryable: true, attempts: 1 });
    expect(seen.map((s) => s.status)).toEqual([503]);
  });

  it('a 429 whose wait ends past the run deadline, well within the execution bound: not waited for', async () => {
    [script, seen] = [[429, 201], []];
    const out = await write('payments-run-deadline-429', { runDeadlineMs: Date.now() + 10 });
    expect(out).toEqual({ status: 'failed', reason: 'rate_limited_past_deadline', retryable: true, attempts: 1 });
    expect(seen.map((s) => s.status)).toEqual([429]);
  });

  it('a lost answer past the run deadline is still settled under the same key: it asks about an effect, it makes none anew', async () => {
    [script, seen] = [[0, 201], []];
    const out = await write('payments-run-deadline-lost', { runDeadlineMs: Date.now() });
    expect(out).toMatchObject({ status: 'succeeded', evidenceRef: 're_1', attempts: 2 });
    expect(seen.map((s) => s.status)).toEqual([0, 201]);
    expect(new Set(seen.map((s) => s.key))).toEqual(new Set(['wf-1:action:1']));
  });

  it('a run deadline after the wait: the 429 gets its one retry', async () => {
    [script, seen] = [[429, 201], []];
    expect(await write('payments-run-deadline-ahead', { runDeadlineMs: Date.now() + 60_000 })).toMatchObject({
      status: 'succeeded',
      attempts: 2,
    });
    expect(seen.map((s) => s.status)).toEqual([429, 201]);
  });
});

describe('a 503 with Retry-After (ADR 0785)', () => {
  afterAll(() => {
    retryAfter503 = undefined;
  });

  it('is sent again after the wait it asks for, under the same key, and pays once', async () => {
    [script, seen, retryAfter503] = [[503, 201], [], '1'];
    expect(await write('payments-503-retry-after')).toMatchObject({ status: 'succeeded', evidenceRef: 're_1', attempts: 2 });
    expect(seen.map((s) => s.status)).toEqual([503, 201]);
    expect(seen[1]!.atMs - seen[0]!.atMs).toBeGreaterThanOrEqual(950);
    expect(new Set(seen.map((s) => s.key))).toEqual(new Set(['wf-1:action:1']));
  });

  it('whose wait ends past the deadline: not waited for, nothing sent again', async () => {
    [script, seen, retryAfter503] = [[503, 201], [], '60'];
    const t0 = Date.now();
    expect(await write('payments-503-past-deadline')).toEqual({
      status: 'failed',
      reason: '503:unavailable',
      retryable: true,
      attempts: 1,
    });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(seen.map((s) => s.status)).toEqual([503]);
  });
});

describe('a retry whose held check cannot be read', () => {
  it('is not sent, and the step is safe to repeat (never failed)', async () => {
    [script, seen] = [[429, 201], []];
    const unreadable = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const out = await write('payments-unreadable-switch', { heldByContainment: unreadable });
    expect(out).toMatchObject({ status: 'retry_safe', reason: HELD_CHECK_UNREADABLE, attempts: 1 });
    expect(seen).toHaveLength(1);
  });

  it('the audit check alike', async () => {
    [script, seen] = [[429, 201], []];
    const unreadable = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const out = await write('payments-unreadable-audit', { heldByContainment: () => Promise.resolve(false), heldByAudit: unreadable });
    expect(out).toMatchObject({ status: 'retry_safe', reason: HELD_CHECK_UNREADABLE, attempts: 1 });
    expect(seen).toHaveLength(1);
  });

  it('with both checks readable and clear, the retry is sent under the same key and pays once', async () => {
    [script, seen] = [[429, 201], []];
    const clear = () => Promise.resolve(false);
    const out = await write('payments-clear', { heldByContainment: clear, heldByAudit: clear });
    expect(out).toMatchObject({ status: 'succeeded', evidenceRef: 're_1', attempts: 2 });
    expect(seen).toHaveLength(2);
  });
});
