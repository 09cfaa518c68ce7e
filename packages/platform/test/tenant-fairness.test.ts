import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { queueName, resetTestFaultsForTests, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction, type OutboxRow } from '@gatehouse/ledger';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { createProposal } from '@gatehouse/testing';
import { createLogger } from '../src/logger.ts';
import { OutboxRelay } from '../src/outbox-relay.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { fairPriority } from '../src/tenant-fairness.ts';

// docs/decisions/0500-tenant-fair-queues.md: a tenant with a backlog on a queue delays another
// tenant's next job by about one of its own jobs, not by its whole backlog (real Postgres, Redis,
// BullMQ, and the services' own worker factory, which keeps each queue's fair clock).

let t: TestDatabase;
let queues: QueueRegistry;
let gate: PostgresGate;
const log = createLogger('test');
log.level = 'silent';
const prefix = testQueuePrefix();
let release = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
  gate = new PostgresGate(t.db, log);
});
afterAll(async () => {
  gate?.close();
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS;
  delete process.env.GATEHOUSE_ENV;
  resetTestFaultsForTests();
});

/** Writes one turn job per new workflow of `tenant` on release `rel`, in order. */
async function writeTurns(tenant: string, n: number, rel: string): Promise<OutboxRow[]> {
  const rows: OutboxRow[] = [];
  for (let i = 0; i < n; i++) {
    const { workflowId } = await createProposal(t.db, { tool: 'lookup_order', arguments: { orderId: 'O-1001' }, tenant, release: rel });
    rows.push(await inTransaction(t.db, (trx) => enqueueInTransaction(trx, turnsQueue, { release: rel, workflowId, round: 1 })));
  }
  return rows;
}

/**
 * A `turns` worker of release `rel` with one slot, as the services start theirs; each job calls
 * `onJob` with its workflow id and waits for what it returns.
 */
function oneSlotWorker(rel: string, onJob: (workflowId: string) => Promise<void> | void) {
  return createWorker(turnsQueue, async (job: TurnJob) => onJob(job.workflowId), {
    release: rel,
    prefix,
    redisUrl: TEST_REDIS_URL,
    log,
    gate,
    concurrency: 1,
  });
}

/** Runs `total` jobs of `rel`'s turns queue on one slot; returns the workflow ids in the order they ran. */
async function runInOrder(rel: string, total: number): Promise<string[]> {
  const order: string[] = [];
  let done!: () => void;
  const finished = new Promise<void>((res) => (done = res));
  const worker = oneSlotWorker(rel, (workflowId) => {
    order.push(workflowId);
    if (order.length === total) done();
  });
  await finished;
  await worker.close();
  return order;
}

const workflowOf = (r: OutboxRow): string => (r.payload as { workflowId: string }).workflowId;

/**
 * quillfeather's 30 jobs are published, then northwind's 3, through the relay's fast path or its
 * sweep; one worker slot takes them all. Returns the 1-based positions of northwind's jobs.
 */
async function backlogThenNeighbour(path: 'publish' | 'sweep'): Promise<{ northwind: number[]; rows: OutboxRow[] }> {
  const rel = `rel-fair-${++release}`;
  const busy = await writeTurns('quillfeather', 30, rel);
  const quiet = await writeTurns('northwind', 3, rel);
  const relay = new OutboxRelay(t.db, queues, log);
  if (path === 'publish') {
    await relay.publish(busy);
    await relay.publish(quiet);
  } else {
    // The sweep takes rows in id order, as a crash would have left them: the same order as above.
    while ((await relay.sweep(0)) > 0);
  }
  await relay.stop();
  const quietIds = new Set(quiet.map(workflowOf));
  const order = await runInOrder(rel, 33);
  const northwind = order.flatMap((id, i) => (quietIds.has(id) ? [i + 1] : []));
  return { northwind, rows: [...busy, ...quiet] };
}

describe('tenant-fair queues', () => {
  it.each(['publish', 'sweep'] as const)('a neighbour backlog of 30 delays northwind by about one job each (%s)', async (path) => {
    const { northwind, rows } = await backlogThenNeighbour(path);
    expect(rows.map((r) => r.fair_key)).toEqual([...Array(30).fill('quillfeather'), ...Array(3).fill('northwind')]);
    // Tags: quillfeather 1…30, northwind 1, 2, 3 (nothing started yet): they alternate.
    expect(northwind).toEqual([2, 4, 6]);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS=1): northwind waits behind the whole backlog', async () => {
    process.env.GATEHOUSE_ENV = 'test';
    process.env.GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS = '1';
    resetTestFaultsForTests();
    const { northwind } = await backlogThenNeighbour('publish');
    expect(northwind).toEqual([31, 32, 33]);
  });

  it('a burst of adds racing each other on an empty queue: each tenant still gets its own 1, 2, 3 …', async () => {
    // Every tag is asked for before any job lands on the queue (the bench's backlog of concurrent
    // adds): a reset on an empty queue would give all of them tag 1 and northwind would run last.
    for (let trial = 0; trial < 5; trial++) {
      const rel = `rel-fair-${++release}`;
      const queue = queues.get(queueName('turns', rel));
      const ask = (tenant: string) => fairPriority(queue, queues.connection as never, tenant);
      const tags = await Promise.all([...Array.from({ length: 40 }, () => ask('quillfeather')), ask('northwind')]);
      expect(tags.slice(0, 40).sort((a, b) => a! - b!)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
      expect(tags[40]).toBe(1);
    }
  });

  it("a tenant's own jobs keep their order, and a tenant arriving late starts at the started jobs' clock, not at 1", async () => {
    const rel = `rel-fair-${++release}`;
    const queue = queues.get(queueName('turns', rel));
    const add = async (tenant: string, id: string): Promise<number | undefined> => {
      const priority = await fairPriority(queue, queues.connection as never, tenant);
      const job: TurnJob = { release: rel, workflowId: id, round: 1 };
      await queue.add(turnsQueue.jobName, job, { jobId: id, priority });
      return priority;
    };
    const q = Array.from({ length: 11 }, () => randomUUID());
    const n1 = randomUUID();
    const tags: Array<number | undefined> = [];
    for (const id of q.slice(0, 10)) tags.push(await add('quillfeather', id));
    expect(tags).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // One slot: five jobs run, the sixth starts and is held, so the clock reads 6.
    const order: string[] = [];
    let release6!: () => void;
    const held = new Promise<void>((res) => (release6 = res));
    let sixthStarted!: () => void;
    const sixth = new Promise<void>((res) => (sixthStarted = res));
    const worker = oneSlotWorker(rel, async (id) => {
      order.push(id);
      if (order.length === 6) {
        sixthStarted();
        await held;
      }
    });
    await sixth;
    // The clock moves on BullMQ's `active` event, sent without waiting: let it land.
    const clock = async () => Number(await (queues.connection as Redis).zscore(`${queue.keys['']}fair-clock`, 'v'));
    for (let i = 0; i < 50 && (await clock()) < 6; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await clock()).toBe(6);
    // northwind joins at the clock + 1: ahead of quillfeather's 8…10, behind its 7 (no catch-up burst from 1).
    expect(await add('northwind', n1)).toBe(7);
    expect(await add('quillfeather', q[10]!)).toBe(11);
    release6();
    for (let i = 0; i < 200 && order.length < 12; i++) await new Promise((r) => setTimeout(r, 20));
    await worker.close();
    expect(order).toEqual([...q.slice(0, 7), n1, ...q.slice(7)]);
  });

  // ADR 0500: jobs removed without starting (quarantine) leave their tenant's tags ahead of the
  // clock; forgetting the tags puts every tenant's next job back at the clock.
  it.each([true, false])(
    'after its queued jobs were removed, forgetting the tags lets a tenant start at the clock again (forget: %s)',
    async (forget) => {
      const rel = `rel-fair-${++release}`;
      const name = queueName('turns', rel);
      const queue = queues.get(name);
      for (let i = 0; i < 20; i++) {
        const id = randomUUID();
        await queues.add(name, turnsQueue.jobName, { release: rel, workflowId: id, round: 1 }, { jobId: id }, 'quillfeather');
      }
      await queue.obliterate({ force: true }); // the jobs go without starting (as quarantine removes them)
      if (forget) await queues.forgetFairTags(name);
      const next = await fairPriority(queue, queues.connection as never, 'quillfeather');
      // Without the forget, quillfeather's next job would wait behind 20 jobs of any other tenant.
      expect(next).toBe(forget ? 1 : 21);
      expect(await fairPriority(queue, queues.connection as never, 'northwind')).toBe(1);
    },
  );
});
