import { afterAll, describe, it } from 'vitest';
import { executionsQueue, jobOptionsFor } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL } from '@gatehouse/test-harness';
import { createRedis, QueueRegistry } from '../../packages/platform/src/index.ts';
import { EXECUTIONS_QUEUE, RESULTS_QUEUE, startHarness, waitFor, type Harness } from './support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from './support/processes.ts';

// The crash matrix (docs/product/hard-cases.md#crash-points): a real executor process is killed (SIGKILL by the test hook) at
// each crash point, then a fresh executor without hooks runs over the same database and Redis.
// Each case must end with exactly one refund or one shipment at the systems of record and the
// workflow's result recorded (a `results` job). Control removed: without the write-ahead
// dispatch mark a reship killed after dispatch is sent twice — the mark is load-bearing.

type Tool = 'issue_refund' | 'reship_order';
type CrashPoint = 'before_dispatch' | 'after_dispatch' | 'after_record';

// Each case has its own database: the executors' outbox sweeps publish every unpublished row of
// their database into their own queue prefix, so cases sharing one would take each other's results.
const harnesses: Harness[] = [];
const redis = createRedis(TEST_REDIS_URL);
const prefixes: string[] = [];
const running: ExecutorProcess[] = [];
afterAll(async () => {
  await Promise.all(running.map((p) => p.stop(2000)));
  redis.disconnect();
  for (const p of prefixes) await dropQueuePrefix(TEST_REDIS_URL, p);
  await Promise.all(harnesses.map((h) => h.close()));
});

async function crashThenRecover(tool: Tool, crashAt: CrashPoint, opts: { disableWriteAhead?: boolean } = {}) {
  const h = await startHarness({ poolSize: 4 });
  harnesses.push(h);
  const prefix = testQueuePrefix();
  prefixes.push(prefix);
  const queues = new QueueRegistry(redis, prefix);
  const orderId = await h.newOrder();
  const a = await createAction(h.db, { tool, orderId, amountCents: 6000 });
  const noMark: Record<string, string> = opts.disableWriteAhead ? { GATEHOUSE_TEST_DISABLE_WRITE_AHEAD: '1' } : {};
  const env = executorEnv(
    { databaseUrl: h.tdb.url, prefix, stagingUrl: h.stagingUrl, signingKeyPath: h.delegationKeyPath },
    { LEASE_MS: '4000', EXECUTOR_LOCK_MS: '1000', EXECUTION_DEADLINE_MS: '3000', ...noMark },
  );
  try {
    await queues.get(EXECUTIONS_QUEUE).add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
    const doomed = startExecutor({ ...env, GATEHOUSE_TEST_CRASH_AT: crashAt, GATEHOUSE_TEST_CRASH_TOOL: tool });
    running.push(doomed);
    // Seven cases run at once, each booting two executors: boot, claim and crash take a while on 2 loaded cores.
    const death = await Promise.race([doomed.exited, new Promise<null>((r) => setTimeout(() => r(null), 60_000))]);
    const atCrash = {
      death,
      op: await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirst(),
      posts: (await h.requests(orderId)).filter((r) => r.method === 'POST').length,
      log: doomed.output().slice(-1500),
    };
    const fresh = startExecutor(env);
    running.push(fresh);
    const results = queues.get(RESULTS_QUEUE);
    const resultJob = await waitFor(
      `${tool}/${crashAt}: outcome recorded and result published`,
      async () => {
        const op = await h.db.selectFrom('operations').select('status').where('key', '=', a.operationKey).executeTakeFirst();
        if (op?.status !== 'succeeded') return null;
        return (await results.getJob(`result_${a.workflowId}_${a.callId}`)) ?? null;
      },
      60_000,
      200,
    );
    await fresh.stop();
    return {
      a,
      atCrash,
      op: await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow(),
      action: await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow(),
      result: resultJob.data as { output: Record<string, unknown>; park?: string },
      posts: (await h.requests(orderId)).filter((r) => r.method === 'POST'),
      refunds: await h.refunds(orderId),
      shipments: await h.shipments(orderId),
    };
  } finally {
    await queues.close();
  }
}

describe.concurrent(
  'executor crash matrix (real processes, SIGKILL at each crash point, fresh executor over the same DB and Redis)',
  () => {
    for (const crashAt of ['before_dispatch', 'after_dispatch', 'after_record'] as const) {
      it(`issue_refund killed ${crashAt} → exactly one refund, result recorded`, { timeout: 150_000 }, async ({ expect }) => {
        const r = await crashThenRecover('issue_refund', crashAt);
        expect(r.atCrash.death, r.atCrash.log).toMatchObject({ signal: 'SIGKILL' });
        if (crashAt === 'before_dispatch') expect(r.atCrash).toMatchObject({ posts: 0, op: { status: 'running', dispatched_at: null } });
        if (crashAt === 'after_dispatch') expect(r.atCrash).toMatchObject({ posts: 1, op: { status: 'running' } });
        if (crashAt === 'after_record') expect(r.atCrash).toMatchObject({ posts: 1, op: { status: 'succeeded' } });
        expect(r.refunds).toEqual([expect.objectContaining({ idempotencyKey: r.a.operationKey, amountCents: 6000 })]);
        // a re-dispatch after the crash reuses the key and is replayed by the ledger
        expect(new Set(r.posts.map((p) => p.idempotencyKey))).toEqual(new Set([r.a.operationKey]));
        expect(r.posts.filter((p) => p.status === 201)).toHaveLength(1);
        expect(r.op.status).toBe('succeeded');
        expect(r.action.status).toBe('succeeded');
        expect(r.result.output).toMatchObject({});
        expect(JSON.stringify(r.result.output)).toContain('succeeded');
        expect(r.result.park).toBeUndefined();
      });

      it(
        `reship_order killed ${crashAt} → exactly one shipment (read-back, never a blind re-send), result recorded`,
        { timeout: 150_000 },
        async ({ expect }) => {
          const r = await crashThenRecover('reship_order', crashAt);
          expect(r.atCrash.death, r.atCrash.log).toMatchObject({ signal: 'SIGKILL' });
          if (crashAt === 'before_dispatch') expect(r.atCrash).toMatchObject({ posts: 0, op: { status: 'running', dispatched_at: null } });
          if (crashAt === 'after_dispatch') expect(r.atCrash.op?.dispatched_at).not.toBeNull();
          expect(r.shipments).toHaveLength(1);
          expect(r.posts).toHaveLength(1);
          expect(r.op.baseline).toMatchObject({ shipments: 0, readAt: expect.any(String) });
          expect(r.op.status).toBe('succeeded');
          expect(r.action.status).toBe('succeeded');
          expect(JSON.stringify(r.result.output)).toContain('succeeded');
        },
      );
    }

    it(
      'control removed: reship killed after dispatch with the write-ahead mark disabled on both executors → two shipments',
      { timeout: 150_000 },
      async ({ expect }) => {
        const r = await crashThenRecover('reship_order', 'after_dispatch', { disableWriteAhead: true });
        expect(r.atCrash.death, r.atCrash.log).toMatchObject({ signal: 'SIGKILL' });
        expect(r.atCrash.op).toMatchObject({ status: 'running', dispatched_at: null });
        // the fresh executor cannot tell the shipment was sent and sends it again
        expect(r.shipments).toHaveLength(2);
        expect(r.posts).toHaveLength(2);
      },
    );
  },
);
