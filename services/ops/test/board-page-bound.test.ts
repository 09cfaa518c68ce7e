import { afterAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { tokenFor } from '@gatehouse/cli';
import { QueueRegistry } from '@gatehouse/platform';
import { BOARD_MAX_JOBS_PER_PAGE, createQueueBoard, type QueueBoard } from '../src/index.ts';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// The queue board's own API reads as many jobs as `jobsPerPage` asks for, and bull-board sets no
// upper bound: one GET with jobsPerPage=10000 read 10,000 jobs (42 MB of JSON in 8 s, the ops
// process from 204 to 367 MB), and four at once kept Redis from answering ops's readiness probe.
// A page past the board UI's own largest setting is refused with a reason and reads no job
// (docs/decisions/0736-the-queue-board-reads-a-bounded-page.md).

let redis: Redis | undefined;
let prefix = '';
let queues: QueueRegistry | undefined;
let board: QueueBoard | undefined;
const app = opsAppFixture('ops-board-page-bound', (ctx) => {
  redis = ctx.redis;
  prefix = ctx.prefix;
  queues = new QueueRegistry(ctx.redis, ctx.prefix);
  board = createQueueBoard({ db: ctx.db, redis: ctx.redis, queues });
  return { board };
});
afterAll(async () => {
  await queues?.close();
});

/** Queues `n` small waiting jobs on turns.rel-1 (a queue of rel-1's manifest, so on the board). */
async function seedJobs(n: number): Promise<void> {
  const q = new Queue('turns.rel-1', { prefix, connection: redis! });
  await q.addBulk(Array.from({ length: n }, (_, i) => ({ name: 'seeded', data: { i } })));
  await q.close();
}

/** GET the board's queue list for turns.rel-1's waiting jobs, `jobsPerPage` of them (a raw query value). */
async function boardPage(jobsPerPage: string, status = 'waiting', api = '/queues/api') {
  const ops = await tokenFor('ops-gus', SECRET);
  const url = `${app.url()}${api}/queues?activeQueue=turns.rel-1&status=${status}&page=1&jobsPerPage=${jobsPerPage}`;
  const res = await fetch(url, { headers: { authorization: `Bearer ${ops}` }, signal: AbortSignal.timeout(20_000) });
  return {
    status: res.status,
    body: (await res.json()) as {
      queues?: { name: string; jobs: unknown[] }[];
      error?: { reason: string; message: string };
    },
  };
}

describe('the queue board reads a bounded page of jobs', () => {
  it('answers a page of up to the bound, and refuses one past it (400, the bound named) without reading a job', async () => {
    await seedJobs(BOARD_MAX_JOBS_PER_PAGE + 20);
    await board!.refresh();
    const ok = await boardPage(String(BOARD_MAX_JOBS_PER_PAGE));
    expect(ok.status).toBe(200);
    expect(ok.body.queues!.find((q) => q.name === 'turns.rel-1')!.jobs).toHaveLength(BOARD_MAX_JOBS_PER_PAGE);

    for (const [value, status] of [
      [String(BOARD_MAX_JOBS_PER_PAGE + 1), 'waiting'],
      ['10000', 'waiting'],
      ['10000', 'latest'],
      ['1000000000000', 'waiting'],
      ['1e5', 'waiting'],
      ['0x2710', 'waiting'],
      ['Infinity', 'waiting'],
    ] as const) {
      const refused = await boardPage(value, status);
      expect(refused.status, value).toBe(400);
      expect(refused.body.queues, value).toBeUndefined();
      expect(refused.body.error).toMatchObject({ reason: 'invalid_query' });
      expect(refused.body.error!.message).toContain(`at most ${BOARD_MAX_JOBS_PER_PAGE}`);
    }
  });

  // Express (and so bull-board's router) matches paths case-insensitively: `/queues/API/queues`
  // is the board's API, and read 10,000 jobs past the bound (found by h120's on-call pass).
  it('refuses a page past the bound however the API path is cased', async () => {
    await seedJobs(BOARD_MAX_JOBS_PER_PAGE + 20);
    await board!.refresh();
    for (const api of ['/queues/API', '/queues/Api', '/QUEUES/API']) {
      const refused = await boardPage('10000', 'waiting', api);
      expect(refused.status, api).toBe(400);
      expect(refused.body.queues, api).toBeUndefined();
      expect(refused.body.error, api).toMatchObject({ reason: 'invalid_query' });
    }
  });

  it('still answers bull-board’s own refusal for a value that is not a positive integer', async () => {
    for (const value of ['abc', '0', '-5']) expect((await boardPage(value)).status, value).toBe(400);
  });
});
