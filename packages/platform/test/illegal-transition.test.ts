import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from 'bullmq';
import { queueName, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { inTransaction, transitionWorkflow } from '@gatehouse/ledger';
import { createLogger } from '../src/logger.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// A job whose handler asks for a move the transition table refuses (docs/product/states.md#transition-table)
// completes as a refusal on its first attempt: not retried into the dead letter, nothing written.

let t: TestDatabase;
let prefix: string;
let queues: QueueRegistry;
let worker: Worker;
const attempts = new Map<string, number>();
const exhausted: string[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
  worker = createWorker(
    turnsQueue,
    async (p: TurnJob) => {
      attempts.set(p.workflowId, (attempts.get(p.workflowId) ?? 0) + 1);
      await inTransaction(t.db, (trx) => transitionWorkflow(trx, p.workflowId, { to: 'investigating', round: p.round }));
      return 'moved';
    },
    {
      release: 'rel-1',
      prefix,
      redisUrl: TEST_REDIS_URL,
      log: createLogger('test'),
      gate: new PostgresGate(t.db, createLogger('test')),
      onExhausted: async (p) => {
        exhausted.push(p.workflowId);
      },
    },
  );
});
afterAll(async () => {
  await worker?.close();
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

describe('a refused transition in a queue job', () => {
  it('completes the job as refused:illegal_transition on its first attempt, the run unchanged', async () => {
    const a = await createAction(t.db, { orderId: 'O-1002' });
    await t.db.updateTable('workflows').set({ state: 'completed' }).where('id', '=', a.workflowId).execute();
    const job: TurnJob = { release: 'rel-1', workflowId: a.workflowId, round: 1 } as TurnJob;
    const q = queues.get(queueName('turns', 'rel-1'));
    const id = turnsQueue.jobId(job);
    await q.add(turnsQueue.jobName, job, { ...turnsQueue.options, attempts: 3, backoff: { type: 'fixed', delay: 10 }, jobId: id });
    let state = '';
    for (const until = Date.now() + 60_000; Date.now() < until && state !== 'completed' && state !== 'failed';) {
      await new Promise((r) => setTimeout(r, 50));
      state = await q.getJobState(id);
    }
    expect(state).toBe('completed');
    expect((await q.getJob(id))?.returnvalue).toBe('refused:illegal_transition:workflow:completed->investigating');
    expect(attempts.get(a.workflowId)).toBe(1);
    expect(exhausted).toEqual([]);
    const wf = await t.db.selectFrom('workflows').select(['state', 'round']).where('id', '=', a.workflowId).executeTakeFirstOrThrow();
    expect(wf).toEqual({ state: 'completed', round: 0 });
  });
});
