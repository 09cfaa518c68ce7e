import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executionsQueue, jobOptionsFor } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { EXECUTIONS_QUEUE, startHarness, waitFor, type Harness } from './support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from './support/processes.ts';

// Graceful shutdown: SIGTERM while a job is in flight and the adapter fails shortly
// after. The worker finishes the job before the process exits, so within the lease the operation
// is resolved (retried with the same key, then marked) — never left `running`.

let h: Harness;
let ex: ExecutorProcess | undefined;
beforeAll(async () => {
  h = await startHarness({ poolSize: 4 });
});
afterAll(async () => {
  await ex?.stop(2000);
  await h?.close();
});

describe('executor: graceful shutdown (real process)', () => {
  it('SIGTERM mid-execution: the in-flight operation is resolved before exit, same key on every attempt', { timeout: 60_000 }, async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2500 });
    // Every attempt fails (503); the retries with backoff run while the process is stopping.
    await h.arm({ target: 'payments', mode: 'server_error', times: 10 });
    ex = startExecutor(
      executorEnv(
        { databaseUrl: h.tdb.url, prefix: h.prefix, stagingUrl: h.stagingUrl, signingKeyPath: h.delegationKeyPath },
        { LEASE_MS: '20000' },
      ),
    );
    await ex.ready;
    await h.queues.get(EXECUTIONS_QUEUE).add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
    await waitFor('the operation to be running', async () => {
      const op = await h.db.selectFrom('operations').select('status').where('key', '=', a.operationKey).executeTakeFirst();
      return op?.status === 'running' ? op : undefined;
    });
    ex.child.kill('SIGTERM');
    const exit = await ex.exited;
    expect(exit.code).toBe(0);

    const op = await h.db
      .selectFrom('operations')
      .select(['status', 'error', 'lease_owner'])
      .where('key', '=', a.operationKey)
      .executeTakeFirstOrThrow();
    expect(op.status).not.toBe('running');
    expect(['failed', 'succeeded']).toContain(op.status);
    expect(op.lease_owner).toBeNull();
    const posts = (await h.requests(orderId)).filter((r) => r.method === 'POST');
    expect(posts.length).toBeGreaterThanOrEqual(2);
    expect(new Set(posts.map((r) => r.idempotencyKey))).toEqual(new Set([a.operationKey]));
    // The outcome reached the outbox for the agent loop before the process ended.
    const results = await h.db.selectFrom('outbox').select('job_id').where('queue', '=', 'results.rel-1').execute();
    expect(results.length).toBeGreaterThanOrEqual(1);
  });
});
