import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executionsQueue, jobOptionsFor } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import { createWorker, PostgresGate } from '../../packages/platform/src/index.ts';
import { processExecution } from '@gatehouse/executor';
import { EXECUTIONS_QUEUE, RELEASE, RESULTS_QUEUE, startHarness, type Harness } from './support/harness.ts';

// docs/product/invariants.md#exactly-once and docs/product/hard-cases.md: duplicate delivery, client retries after a lost response, and 429
// with Retry-After all converge on one refund under one idempotency key. Effects are asserted at
// the payments ledger's read-back and request log, not at the executor's own status.

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

type Worker = ReturnType<typeof createWorker>;

function nextOutcome(worker: Worker, jobId: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const done = (job: { id?: string } | undefined, value: unknown, err?: Error): void => {
      if (job?.id !== jobId) return;
      worker.off('completed', onDone);
      worker.off('failed', onFail);
      if (err) reject(err);
      else resolve(value);
    };
    const onDone = (job: { id?: string }, value: unknown): void => done(job, value);
    const onFail = (job: { id?: string } | undefined, err: Error): void => done(job, undefined, err);
    worker.on('completed', onDone);
    worker.on('failed', onFail);
  });
}

describe('executor: duplicate delivery and client retries', () => {
  it('a job that completed and was removed, delivered again 5 ms later with the same id: one downstream call, the stored outcome', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 7200 });
    expect(a.approvalId).not.toBeNull();
    const deps = h.deps();
    const worker = createWorker(executionsQueue, (p) => processExecution(p, deps), {
      release: RELEASE,
      prefix: h.prefix,
      redisUrl: TEST_REDIS_URL,
      log: h.log,
      gate: new PostgresGate(h.db, h.log),
      concurrency: 1,
    });
    try {
      const queue = h.queues.get(EXECUTIONS_QUEUE);
      const opts = { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId, removeOnComplete: true };
      const first = nextOutcome(worker, a.jobId);
      await queue.add(executionsQueue.jobName, a.job, opts);
      expect(await first).toBe('succeeded');
      expect(await queue.getJob(a.jobId)).toBeUndefined(); // removed: the queue forgot the id

      await new Promise((r) => setTimeout(r, 5));
      const second = nextOutcome(worker, a.jobId);
      await queue.add(executionsQueue.jobName, a.job, opts);
      expect(await second).toBe('replay:succeeded');
    } finally {
      await worker.close();
    }

    const requests = await h.requests(orderId);
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatchObject({ method: 'POST', status: 201, idempotencyKey: a.operationKey, fencingToken: 1 });
    expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ idempotencyKey: a.operationKey, amountCents: 7200 })]);
    expect((await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow()).status).toBe(
      'used',
    );
    const op = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op).toMatchObject({ status: 'succeeded', fencing_token: '1', attempts: 1 });
    // both deliveries answered the call with the original outcome (one results job id)
    const result = await h.queues.get(RESULTS_QUEUE).getJob(`result_${a.workflowId}_${a.callId}`);
    expect(result?.data).toMatchObject({ workflowId: a.workflowId, callId: a.callId, output: expect.objectContaining({}) });
    expect(JSON.stringify(result?.data.output)).toContain('succeeded');
  });

  it('the payments ledger commits and the response is lost: the retry carries the same key, one refund', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3100 });
    await h.arm({ target: 'payments', mode: 'commit_then_lose_response', times: 1 });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');

    const requests = await h.requests(orderId);
    expect(requests.length).toBeGreaterThanOrEqual(2);
    expect(requests[0]).toMatchObject({ status: 201, reason: 'fault:commit_then_lose_response' });
    expect(requests[1]).toMatchObject({ status: 200, reason: 'idempotent_replay' });
    expect(new Set(requests.map((r) => r.idempotencyKey))).toEqual(new Set([a.operationKey]));
    expect(new Set(requests.map((r) => r.fencingToken))).toEqual(new Set([1]));
    expect(await h.refunds(orderId)).toHaveLength(1);
    const op = await h.db
      .selectFrom('operations')
      .select(['status', 'evidence_ref'])
      .where('key', '=', a.operationKey)
      .executeTakeFirstOrThrow();
    expect(op.status).toBe('succeeded');
    expect(op.evidence_ref).toBe((await h.refunds(orderId))[0]?.refundId);
  });

  it('429 with Retry-After 1 s: exactly one retry, after the requested delay, with the same key, then success', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2500 });
    await h.arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 1000, times: 1 });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');

    const requests = await h.requests(orderId);
    expect(requests.map((r) => [r.status, r.reason])).toEqual([
      [429, 'fault:rate_limit'],
      [201, null],
    ]);
    expect(requests.every((r) => r.idempotencyKey === a.operationKey)).toBe(true);
    const gap = Date.parse(requests[1]!.at) - Date.parse(requests[0]!.at);
    expect(gap).toBeGreaterThanOrEqual(900);
    expect(await h.refunds(orderId)).toHaveLength(1);
  });

  it('408 request_timeout (the request was not read): retried with the same key, then success — it was a final failure', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2550 });
    await h.arm({ target: 'payments', mode: 'request_timeout', times: 1 });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');

    const requests = await h.requests(orderId);
    expect(requests.map((r) => r.status)).toEqual([408, 201]);
    expect(requests.every((r) => r.idempotencyKey === a.operationKey)).toBe(true);
    expect(await h.refunds(orderId)).toHaveLength(1);
  });

  it('429 with a Retry-After past the deadline: no wait for a retry that cannot be made, failed at once, nothing refunded', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2600 });
    await h.arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 600_000, times: 1 });

    expect(await processExecution(a.job, h.deps())).toMatch(/^failed/);

    expect((await h.requests(orderId)).map((r) => [r.status, r.reason])).toEqual([[429, 'fault:rate_limit']]);
    const op = await h.db.selectFrom('operations').select(['status', 'error']).where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op).toEqual({ status: 'failed', error: 'rate_limited_past_deadline' });
    expect(await h.refunds(orderId)).toEqual([]);
  });
});
