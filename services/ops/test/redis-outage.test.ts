import { spawn, type ChildProcess } from 'node:child_process';
import type { Server } from 'node:http';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { repoRoot } from '@gatehouse/contracts';
import { closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import {
  createTestDatabase,
  freePort,
  startPrivateRedis,
  testQueuePrefix,
  type PrivateRedis,
  type TestDatabase,
} from '@gatehouse/test-harness';
import { BOARD_API_DEADLINE_MS, COUNTS_TIMEOUT_MS, createOpsApp, createQueueBoard, type QueueBoard } from '../src/index.ts';
import { DISCOVERY_REDIS_TIMEOUT_MS } from '../src/domain/queue-catalog.ts';

// The dashboard shows the ledger whether Redis answers or not: queue counts are null ("Redis did
// not answer") within a couple of seconds, the board's own API answers 503, and the process
// starts listening with Redis down (docs/decisions/0651-ops-without-redis.md).

const SECRET = 'local-auth-secret-change-me';
/** The longest an overview may take while Redis is away, ms: the counts' bound and some slack. */
const PROMPT_MS = 2500;

let t: TestDatabase;
let ops: string;

beforeAll(async () => {
  t = await createTestDatabase();
  ops = await tokenFor('ops-gus', SECRET);
});
afterAll(async () => {
  await t?.drop();
});

/** The parts of the answers these tests read (an overview, a queue list or an error; an HTML page is its text). */
interface Answer {
  workflows: { counts: Record<string, number> };
  queues: { name: string; counts: Record<string, number> | null }[];
  error: { reason: string; message: string };
}

/** GET `url` with the operator's token; its status, JSON body (or text) and how long it took, ms. */
async function timedGet(url: string): Promise<{ status: number; body: Answer; ms: number }> {
  const started = Date.now();
  const res = await fetch(url, { headers: { authorization: `Bearer ${ops}` }, signal: AbortSignal.timeout(20_000) });
  const text = await res.text();
  let body = text as unknown as Answer;
  try {
    body = JSON.parse(text) as Answer;
  } catch {
    // an HTML page
  }
  return { status: res.status, body, ms: Date.now() - started };
}

describe('the ops process with Redis down from the start', () => {
  let child: ChildProcess | undefined;
  let out = '';
  let url = '';

  beforeAll(async () => {
    const [port, nothing] = [await freePort(), await freePort()];
    url = `http://127.0.0.1:${port}`;
    child = spawn(process.execPath, [resolve(repoRoot, 'services/ops/src/main.ts')], {
      cwd: repoRoot,
      env: {
        ...process.env,
        GATEHOUSE_ENV: 'test',
        GATEHOUSE_EXIT_WITH_PARENT: '1',
        DATABASE_URL: t.url,
        // Nothing listens there: every connection attempt is refused.
        REDIS_URL: `redis://127.0.0.1:${nothing}`,
        QUEUE_PREFIX: testQueuePrefix(),
        OPS_PORT: String(port),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  });
  afterAll(async () => {
    const c = child;
    if (c && c.exitCode === null && c.signalCode === null) {
      const gone = new Promise((done) => c.once('exit', done));
      c.kill('SIGKILL');
      await gone;
    }
  });

  it('listens: /healthz answers, /readyz names Redis as failing', { timeout: 60_000 }, async () => {
    const until = Date.now() + 45_000;
    let health: Response | undefined;
    while (!health) {
      expect(child!.exitCode, out).toBeNull();
      health = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) }).catch(() => undefined);
      if (!health) {
        expect(Date.now() < until, `ops never listened with Redis down; its output:\n${out}`).toBe(true);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(health.status).toBe(200);
    const ready = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5000) });
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { failing: Record<string, string> }).failing).toHaveProperty('redis');
  });

  it('/api/overview, /api/queues and /ops answer promptly with the ledger and null counts', { timeout: 30_000 }, async () => {
    const overview = await timedGet(`${url}/api/overview`);
    expect(overview.status, JSON.stringify(overview.body)).toBe(200);
    expect(overview.ms).toBeLessThan(PROMPT_MS);
    expect(overview.body.workflows.counts).toHaveProperty('executing');
    // The manifests still name the queues; Redis could not count them.
    expect(overview.body.queues.length).toBeGreaterThan(0);
    expect(overview.body.queues.every((q) => q.counts === null)).toBe(true);
    const queues = await timedGet(`${url}/api/queues`);
    expect(queues.status).toBe(200);
    expect(queues.ms).toBeLessThan(PROMPT_MS);
    expect(queues.body.queues.every((q) => q.counts === null)).toBe(true);
    const page = await timedGet(`${url}/ops`);
    expect(page.status).toBe(200);
    expect(page.ms).toBeLessThan(PROMPT_MS);
  });

  it("the board's own API answers 503 with a reason at once", { timeout: 30_000 }, async () => {
    const r = await timedGet(`${url}/queues/api/queues`);
    expect(r.status).toBe(503);
    expect(r.body.error.reason).toBe('dependency_unavailable');
    expect(r.body.error.message).toMatch(/redis connection is/);
    expect(r.ms).toBeLessThan(PROMPT_MS);
  });
});

describe('an in-process dashboard whose Redis stops or hangs', () => {
  let redisServer: PrivateRedis;
  let redis: Redis;
  let queues: QueueRegistry;
  let board: QueueBoard;
  let server: Server;
  let url = '';
  const prefix = testQueuePrefix();

  beforeAll(async () => {
    redisServer = await startPrivateRedis();
    // A queue of a release only Redis knows of: discovery finds it while Redis answers.
    const seeder = new Redis(redisServer.url, { maxRetriesPerRequest: null });
    const q = new Queue('turns.rel-only-redis', { connection: seeder, prefix });
    await q.add('turn', { n: 1 }, { jobId: 'j-1' });
    await q.close();
    seeder.disconnect();
    redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
    redis.on('error', () => undefined);
    queues = new QueueRegistry(redis, prefix);
    const log = createLogger('ops-redis-outage-test');
    log.level = 'silent';
    board = createQueueBoard({ db: t.db, redis, queues });
    const app = createOpsApp({
      db: t.db,
      log,
      board,
      verifier: { secret: SECRET },
      auditHmacKey: 'k',
      localSecret: SECRET,
      secureCookie: false,
    });
    const listening = await listen(app, 0, '127.0.0.1');
    server = listening.server;
    url = `http://127.0.0.1:${listening.port}`;
  });
  afterAll(async () => {
    redisServer?.thaw();
    if (server) await closeServer(server);
    redis?.disconnect();
    await redisServer?.stop();
  });

  const onlyRedis = () => board.entries().find((e) => e.name === 'turns.rel-only-redis');

  it('while Redis answers: the Redis-only queue is found and counted', { timeout: 30_000 }, async () => {
    await board.refresh();
    expect(onlyRedis()?.sources).toEqual(['redis']);
    const r = await timedGet(`${url}/api/queues`);
    expect(r.status).toBe(200);
    expect(r.body.queues.find((q) => q.name === 'turns.rel-only-redis')?.counts?.waiting).toBe(1);
  });

  it(
    'a board API request cut at its deadline holds Redis: the next one answers 503 at once, sending nothing',
    { timeout: 60_000 },
    async () => {
      redisServer.freeze();
      try {
        const cut = await timedGet(`${url}/queues/api/queues`);
        expect(cut.status).toBe(503);
        expect(cut.body.error.message).toMatch(/no answer within/);
        const pending = redis.commandQueue.length;
        const again = await timedGet(`${url}/queues/api/queues`);
        expect(again.status).toBe(503);
        expect(again.body.error.message).toMatch(/has not answered earlier commands/);
        expect(again.ms, 'it did not wait for the board deadline again').toBeLessThan(BOARD_API_DEADLINE_MS);
        expect(redis.commandQueue.length, 'nothing more was sent to the frozen Redis').toBe(pending);
      } finally {
        redisServer.thaw();
      }
      // Redis answers the PING sent at the cut: the board reads it again.
      await expect.poll(async () => (await timedGet(`${url}/queues/api/queues`)).status, { timeout: 10_000 }).toBe(200);
    },
  );

  it('a frozen Redis (it accepts, answers nothing): counts null, board API 503, discovery bounded', { timeout: 60_000 }, async () => {
    redisServer.freeze();
    try {
      // Nothing tells the board yet that Redis hangs: its API's request is cut at the deadline.
      const boardApi = await timedGet(`${url}/queues/api/queues`);
      expect(boardApi.status).toBe(503);
      expect(boardApi.body.error.reason).toBe('dependency_unavailable');
      expect(boardApi.body.error.message).toMatch(/no answer within/);
      expect(boardApi.ms).toBeLessThan(BOARD_API_DEADLINE_MS + 1000);
      const first = await timedGet(`${url}/api/overview`);
      expect(first.status).toBe(200);
      expect(first.ms).toBeLessThan(PROMPT_MS);
      expect(first.body.queues.length).toBeGreaterThan(0);
      expect(first.body.queues.every((q) => q.counts === null)).toBe(true);
      // The counts asked for are still unanswered: the next pages send nothing and answer at once.
      const second = await timedGet(`${url}/ops`);
      expect(second.status).toBe(200);
      expect(second.ms, 'it did not wait for counts again').toBeLessThan(COUNTS_TIMEOUT_MS);
      const boardAgain = await timedGet(`${url}/queues/api/queues`);
      expect(boardAgain.status).toBe(503);
      expect(boardAgain.body.error.message).toMatch(/has not answered earlier commands/);
      expect(boardAgain.ms, 'it did not wait for the board deadline again').toBeLessThan(BOARD_API_DEADLINE_MS);
      const started = Date.now();
      const found = await board.refresh();
      expect(Date.now() - started).toBeLessThan(PROMPT_MS + 1000);
      expect(found.some((e) => e.sources.includes('manifest'))).toBe(true);
      // Redis's part was skipped: what it showed before stays on the board.
      expect(onlyRedis()?.sources).toEqual(['redis']);
    } finally {
      redisServer.thaw();
    }
    // Thawed, Redis answers what was sent meanwhile, and the counts come back.
    await expect
      .poll(async () => (await timedGet(`${url}/api/queues`)).body.queues[0]?.counts, { timeout: 10_000 })
      .toHaveProperty('waiting');
  });

  it('a stopped Redis: counts null and the board API 503 without waiting, discovery goes on', { timeout: 60_000 }, async () => {
    await redisServer.kill();
    await expect.poll(() => redis.status, { timeout: 10_000 }).not.toBe('ready');
    // Bounds well above a loaded machine's page time, below a wait for Redis; the offline queue below is the proof.
    const r = await timedGet(`${url}/api/overview`);
    expect(r.status).toBe(200);
    expect(r.ms).toBeLessThan(COUNTS_TIMEOUT_MS);
    expect(r.body.queues.every((q) => q.counts === null)).toBe(true);
    const boardApi = await timedGet(`${url}/queues/api/queues`);
    expect(boardApi.status).toBe(503);
    expect(boardApi.ms).toBeLessThan(BOARD_API_DEADLINE_MS);
    const started = Date.now();
    await board.refresh();
    expect(Date.now() - started).toBeLessThan(DISCOVERY_REDIS_TIMEOUT_MS);
    expect(onlyRedis()?.sources).toEqual(['redis']);
    // Nothing was left waiting in the offline queue for Redis's return.
    expect((redis as unknown as { offlineQueue: { length: number } }).offlineQueue.length).toBe(0);
  });
});
