import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from 'bullmq';
import { queueName, turnsQueue, type OutageMark, type TurnJob } from '@gatehouse/contracts';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { createLogger } from '../src/logger.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { holdWhileUnavailable, outageRecheckDelayMs } from '../src/outage-hold.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// A job whose dependency is down is held, not failed: it keeps the outage's start and goes back
// to the delayed set without using an attempt (ADR 0110). Real Redis and BullMQ.

let t: TestDatabase;
let prefix: string;
let queues: QueueRegistry;
let worker: Worker;
/** Per workflow: how many attempts still meet the outage, and the marks each attempt saw. */
const downFor = new Map<string, number>();
const seen = new Map<string, Array<OutageMark | undefined>>();

beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
  const log = createLogger('test');
  log.level = 'silent';
  worker = createWorker(
    turnsQueue,
    (p: TurnJob, job) =>
      holdWhileUnavailable(job, log, async () => {
        seen.set(p.workflowId, [...(seen.get(p.workflowId) ?? []), p.outage]);
        const left = downFor.get(p.workflowId) ?? 0;
        downFor.set(p.workflowId, left - 1);
        if (left > 0) throw new DependencyUnavailable('model', 'model unavailable: 503');
        if (left === 0 && p.round === 2) throw new Error('a bug, not an outage');
        return 'ok';
      }),
    { release: 'rel-1', prefix, redisUrl: TEST_REDIS_URL, log, gate: new PostgresGate(t.db, log) },
  );
});
afterAll(async () => {
  await worker?.close();
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

async function enqueue(workflowId: string, round = 1): Promise<string> {
  const job: TurnJob = { release: 'rel-1', workflowId, round };
  const id = turnsQueue.jobId(job);
  await queues.get(queueName('turns', 'rel-1')).add(turnsQueue.jobName, job, { ...turnsQueue.options, attempts: 1, jobId: id });
  return id;
}

async function settled(id: string): Promise<string> {
  const q = queues.get(queueName('turns', 'rel-1'));
  for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
    const state = await q.getJobState(id);
    if (state === 'completed' || state === 'failed') return state;
  }
  throw new Error(`job ${id} did not settle`);
}

describe('holdWhileUnavailable', () => {
  it('three attempts meet the outage, a job with one attempt still completes; every held attempt keeps the first start', async () => {
    const wf = '00000000-0000-4000-8000-000000000001';
    downFor.set(wf, 3);
    expect(await settled(await enqueue(wf))).toBe('completed');
    const marks = seen.get(wf)!;
    expect(marks).toHaveLength(4);
    expect(marks[0]).toBeUndefined();
    expect(marks.slice(1).map((m) => m?.dependency)).toEqual(['model', 'model', 'model']);
    expect(new Set(marks.slice(1).map((m) => m?.sinceMs)).size).toBe(1);
  });

  it('an error that is not an outage fails the attempt as before', async () => {
    const wf = '00000000-0000-4000-8000-000000000002';
    downFor.set(wf, 0);
    expect(await settled(await enqueue(wf, 2))).toBe('failed');
    expect(seen.get(wf)).toHaveLength(1);
  });

  it('looks again after half the outage so far, between 0.5 s and 30 s', () => {
    const now = 1_000_000;
    expect(outageRecheckDelayMs({ dependency: 'model', sinceMs: now - 100 }, now)).toBe(500);
    expect(outageRecheckDelayMs({ dependency: 'model', sinceMs: now - 10_000 }, now)).toBe(5_000);
    expect(outageRecheckDelayMs({ dependency: 'model', sinceMs: now - 600_000 }, now)).toBe(30_000);
  });
});
