import { Worker, type Job } from 'bullmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { queueName, resetTestFaultsForTests, turnsQueue } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction, type OutboxRow } from '@gatehouse/ledger';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { createProposal } from '@gatehouse/testing';
import { createLogger } from '../src/logger.ts';
import { OutboxRelay } from '../src/outbox-relay.ts';
import { createRedis, QueueRegistry } from '../src/queues.ts';
import { fairPriority } from '../src/tenant-fairness.ts';

// docs/decisions/0500-tenant-fair-queues.md: a tenant with a backlog on a queue delays another
// tenant's next job by about one of its own jobs, not by its whole backlog (real Postgres, Redis, BullMQ).

let t: TestDatabase;
let queues: QueueRegistry;
const prefix = testQueuePrefix();
let release = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
});
afterAll(async () => {
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS;
  delete process.env.GATEHOUSE_ENV;
  resetTestFaultsForTests();
});

const silentRelay = (): OutboxRelay => {
  const log = createLogger('test');
  log.level = 'silent';
  return new OutboxRelay(t.db, queues, log);
};

/** Writes one turn job per new workflow of `tenant` on release `rel`, in order. */
async function writeTurns(tenant: string, n: number, rel: string): Promise<OutboxRow[]> {
  const rows: OutboxRow[] = [];
  for (let i = 0; i < n; i++) {
    const { workflowId } = await createProposal(t.db, { tool: 'lookup_order', arguments: { orderId: 'O-1001' }, tenant, release: rel });
    rows.push(await inTransaction(t.db, (trx) => enqueueInTransaction(trx, turnsQueue, { release: rel, workflowId, round: 1 })));
  }
  return rows;
}

/** Runs every job of `queue` on one worker slot; returns the tenants in the order they ran. */
async function runInOrder(name: string, total: number, tenantOf: Map<string, string>): Promise<string[]> {
  const order: string[] = [];
  let done!: () => void;
  const finished = new Promise<void>((res) => (done = res));
  const worker = new Worker(
    name,
    async (job: Job) => {
      order.push(tenantOf.get((job.data as { workflowId: string }).workflowId) ?? '?');
      if (order.length === total) done();
    },
    { connection: createRedis(TEST_REDIS_URL), prefix, concurrency: 1 },
  );
  await finished;
  await worker.close();
  return order;
}

/**
 * quillfeather's 30 jobs are published, then northwind's 3, through the relay's fast path or its
 * sweep; one worker slot takes them all. Returns the 1-based positions of northwind's jobs and
 * quillfeather's workflows in the order they ran.
 */
async function backlogThenNeighbour(
  path: 'publish' | 'sweep',
): Promise<{ northwind: number[]; quillfeather: string[]; rows: OutboxRow[] }> {
  const rel = `rel-fair-${++release}`;
  const busy = await writeTurns('quillfeather', 30, rel);
  const quiet = await writeTurns('northwind', 3, rel);
  const relay = silentRelay();
  if (path === 'publish') {
    await relay.publish(busy);
    await relay.publish(quiet);
  } else {
    // The sweep takes rows in id order, as a crash would have left them: the same order as above.
    while ((await relay.sweep(0)) > 0);
  }
  await relay.stop();
  const tenantOf = new Map<string, string>();
  for (const r of busy) tenantOf.set((r.payload as { workflowId: string }).workflowId, 'quillfeather');
  for (const r of quiet) tenantOf.set((r.payload as { workflowId: string }).workflowId, 'northwind');
  const worker: string[] = [];
  const order = await runInOrder(queueName('turns', rel), 33, tenantOf);
  order.forEach((tenant, i) => tenant === 'northwind' && worker.push(String(i + 1)));
  return { northwind: worker.map(Number), quillfeather: order.filter((x) => x === 'quillfeather'), rows: [...busy, ...quiet] };
}

describe('tenant-fair queues', () => {
  it.each(['publish', 'sweep'] as const)('a neighbour backlog of 30 delays northwind by about one job each (%s)', async (path) => {
    const { northwind, rows } = await backlogThenNeighbour(path);
    expect(rows.every((r) => r.fair_key === (rows.indexOf(r) < 30 ? 'quillfeather' : 'northwind'))).toBe(true);
    // Tags: quillfeather 1…30; northwind max(head 1, 0) + 1 = 2, 3, 4 — so they alternate from the 3rd job.
    expect(northwind).toEqual([3, 5, 7]);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS=1): northwind waits behind the whole backlog', async () => {
    process.env.GATEHOUSE_ENV = 'test';
    process.env.GATEHOUSE_TEST_DISABLE_TENANT_FAIRNESS = '1';
    resetTestFaultsForTests();
    const { northwind } = await backlogThenNeighbour('publish');
    expect(northwind).toEqual([31, 32, 33]);
  });

  it("a tenant's own jobs keep their order, and a tenant arriving late starts at the queue's head, not at 1", async () => {
    const rel = `rel-fair-${++release}`;
    const queue = queues.get(queueName('turns', rel));
    const add = async (tenant: string, id: string) => {
      const priority = await fairPriority(queue, queues.connection as never, tenant);
      await queue.add('turn', { id }, { jobId: id, priority });
      return priority;
    };
    const tags: number[] = [];
    for (let i = 1; i <= 10; i++) tags.push((await add('quillfeather', `q${i}`)) ?? 0);
    expect(tags).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // Five jobs start (manual fetch): the head of the waiting jobs is now quillfeather's tag 6.
    const worker = new Worker(queue.name, null, { connection: createRedis(TEST_REDIS_URL), prefix });
    const started = [];
    for (let i = 0; i < 5; i++) started.push((await worker.getNextJob(`token-${i}`))?.id);
    expect(started).toEqual(['q1', 'q2', 'q3', 'q4', 'q5']);
    // northwind joins at head + 1: ahead of quillfeather's 7…10, behind its 6 (no catch-up burst from 1).
    expect(await add('northwind', 'n1')).toBe(7);
    expect(await add('quillfeather', 'q11')).toBe(11);
    const next = [];
    for (let i = 0; i < 7; i++) next.push((await worker.getNextJob(`token-n${i}`))?.id);
    expect(next).toEqual(['q6', 'q7', 'n1', 'q8', 'q9', 'q10', 'q11']);
    await worker.close();
    // Nothing waits now: the numbering starts again for everyone.
    expect(await add('quillfeather', 'q12')).toBe(1);
  });
});
