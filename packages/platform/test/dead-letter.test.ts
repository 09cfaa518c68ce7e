import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from 'bullmq';
import { queueName, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { stopRunOnFailedStep } from '@gatehouse/ledger';
import { createLogger } from '../src/logger.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// The dead letter of a workflow step: a job that fails its last attempt leaves the run in an
// explicit state (stopped(step_failed), audited) instead of a run nothing will ever drive again;
// a job that fails and then succeeds on a retry changes nothing.

let t: TestDatabase;
let prefix: string;
let queues: QueueRegistry;
let worker: Worker;
const attemptsByWorkflow = new Map<string, number>();
/** Workflows whose turn fails once only (then succeeds on the retry). */
const flaky = new Set<string>();

beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
  worker = createWorker(
    turnsQueue,
    async (p: TurnJob) => {
      const n = (attemptsByWorkflow.get(p.workflowId) ?? 0) + 1;
      attemptsByWorkflow.set(p.workflowId, n);
      if (!flaky.has(p.workflowId) || n === 1) throw new Error('relation "x" does not exist');
      return 'ok';
    },
    {
      release: 'rel-1',
      prefix,
      redisUrl: TEST_REDIS_URL,
      log: createLogger('test'),
      gate: new PostgresGate(t.db, createLogger('test')),
      onExhausted: (p) => stopRunOnFailedStep(t.db, p.workflowId, 'turns', 'agent-loop').then(() => {}),
    },
  );
});
afterAll(async () => {
  await worker?.close();
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

async function enqueue(workflowId: string): Promise<void> {
  const job: TurnJob = { release: 'rel-1', workflowId, round: 1 } as TurnJob;
  await queues.get(queueName('turns', 'rel-1')).add(turnsQueue.jobName, job, {
    ...turnsQueue.options,
    attempts: 3,
    backoff: { type: 'exponential', delay: 20 },
    jobId: turnsQueue.jobId(job),
  });
}

async function settledJob(workflowId: string): Promise<string> {
  const q = queues.get(queueName('turns', 'rel-1'));
  const id = turnsQueue.jobId({ release: 'rel-1', workflowId, round: 1 } as TurnJob);
  for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
    const state = await q.getJobState(id);
    if (state === 'completed' || state === 'failed') return state;
  }
  throw new Error(`job ${id} did not settle`);
}

describe('dead letter of a workflow step', () => {
  it('a turn that fails every attempt stops its run with step_failed, once, after the last attempt', async () => {
    const { workflowId } = await createAction(t.db, { orderId: 'O-1002', amountCents: 1000 });
    await enqueue(workflowId);
    expect(await settledJob(workflowId)).toBe('failed');
    for (const until = Date.now() + 30_000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
      const wf = await t.db.selectFrom('workflows').select('state').where('id', '=', workflowId).executeTakeFirstOrThrow();
      if (wf.state === 'stopped') break;
    }
    const wf = await t.db
      .selectFrom('workflows')
      .select(['state', 'stop_reason', 'next_step'])
      .where('id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(wf).toMatchObject({ state: 'stopped', stop_reason: 'step_failed' });
    expect(wf.next_step).toContain('turns');
    expect(attemptsByWorkflow.get(workflowId)).toBe(3);
    const stops = await t.db
      .selectFrom('audit_outbox')
      .select('event')
      .where((eb) => eb.ref('event', '->>').key('runId'), '=', workflowId)
      .where((eb) => eb.ref('event', '->>').key('type'), '=', 'run.stopped')
      .execute();
    expect(stops.map((s) => s.event.outcome)).toEqual(['step_failed']);
  });

  it('a turn that fails once and succeeds on its retry leaves the run as it was', async () => {
    const { workflowId } = await createAction(t.db, { orderId: 'O-1004', amountCents: 1000 });
    flaky.add(workflowId);
    const before = await t.db
      .selectFrom('workflows')
      .select(['state', 'stop_reason'])
      .where('id', '=', workflowId)
      .executeTakeFirstOrThrow();
    await enqueue(workflowId);
    expect(await settledJob(workflowId)).toBe('completed');
    expect(attemptsByWorkflow.get(workflowId)).toBe(2);
    await new Promise((r) => setTimeout(r, 300)); // a dead letter fired on the first failure would have landed by now
    expect(
      await t.db.selectFrom('workflows').select(['state', 'stop_reason']).where('id', '=', workflowId).executeTakeFirstOrThrow(),
    ).toEqual(before);
  });

  it('a run already terminal is left alone', async () => {
    const { workflowId } = await createAction(t.db, { orderId: 'O-1007', amountCents: 1000 });
    await t.db.updateTable('workflows').set({ state: 'completed' }).where('id', '=', workflowId).execute();
    expect(await stopRunOnFailedStep(t.db, workflowId, 'turns', 'agent-loop')).toBe(false);
    expect((await t.db.selectFrom('workflows').select('state').where('id', '=', workflowId).executeTakeFirstOrThrow()).state).toBe(
      'completed',
    );
  });
});
