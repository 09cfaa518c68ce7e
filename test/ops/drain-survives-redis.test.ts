import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { executionsQueue, queueName, repoRoot, resetTestFaultsForTests, type ExecutionJob } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import { runCli, type CliRun } from '../support/cli-process.ts';
import { registerRelease } from '@gatehouse/ledger';
import { createLogger, createWorker, DrainGate, PostgresGate, QueueRegistry } from '@gatehouse/platform';
import { drainRelease, resumeRelease } from '@gatehouse/operations';
import {
  createTestDatabase,
  freePort,
  startPrivateRedis,
  testQueuePrefix,
  type PrivateRedis,
  type TestDatabase,
} from '@gatehouse/test-harness';

// docs/decisions/0480-drain-held-by-the-ledger.md: `queues drain` pauses the release's queues in
// Redis and marks the release draining in the ledger. A Redis restarted without persistence forgets
// the pause (and the watchdog re-drives the lost jobs into it); the workers must still take none of
// the release's jobs until `queues resume`, because the ledger still says draining.

const RELEASE = 'rel-1';
const op = { operator: 'ops-gus', hmacKey: 'test-audit-hmac-key-0123456789' };
const log = createLogger('test');
let t: TestDatabase;
let r: PrivateRedis;

beforeAll(async () => {
  t = await createTestDatabase();
  r = await startPrivateRedis();
  await registerRelease(t.db, RELEASE, {});
});
afterAll(async () => {
  await r?.stop();
  await t?.drop();
});

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; !(await ok()); await sleep(50)) if (Date.now() > end) throw new Error(`timed out: ${what}`);
}

/**
 * One executions worker of rel-1 with its Postgres and drain gates (as every service builds them);
 * drains rel-1, restarts the private Redis empty, enqueues one job, and reports what the worker
 * handled during `watchMs`, then after `queues resume`.
 */
async function drainThenLoseRedis(
  watchMs: number,
  opts: { runsWhileDrained?: boolean } = {},
): Promise<{ pauseKept: boolean; whileDrained: number; afterResume: number }> {
  const prefix = testQueuePrefix();
  const pg = new PostgresGate(t.db, log);
  const drain = new DrainGate(t.db, RELEASE, log, { pollMs: 200, deferMs: 300, postgres: pg });
  void drain.start();
  const handled: string[] = [];
  const worker = createWorker(executionsQueue, async (job) => void handled.push(job.actionId), {
    release: RELEASE,
    prefix,
    redisUrl: r.url,
    log,
    gate: pg,
    drain,
  });
  const redis = new Redis(r.url, { maxRetriesPerRequest: null });
  const queues = new QueueRegistry(redis, prefix);
  try {
    await drainRelease(t.db, queues, RELEASE, op);
    await until('the drain gate reads the mark', () => drain.draining || process.env.GATEHOUSE_TEST_DISABLE_DRAIN_GATE === '1', 5000);
    await sleep(400);
    await r.restart();
    const queue = queues.get(queueName(executionsQueue.base, RELEASE));
    await until('redis answers again', async () => (await redis.ping().catch(() => '')) === 'PONG');
    const pauseKept = await queue.isPaused();
    const job: ExecutionJob = { release: RELEASE, workflowId: randomUUID(), actionId: randomUUID(), actionVersion: 1, approvalId: null };
    await queue.add(executionsQueue.jobName, job, { jobId: `exec_${job.actionId}` });
    // Control removed, the job runs once the worker is back on the new Redis: wait for that (a
    // fixed window would also count a slow reconnect as "held"). Designed, nothing may run: watch
    // for `watchMs`.
    if (opts.runsWhileDrained) await until('the job runs without the drain gate', () => handled.length > 0, 60_000);
    else await sleep(watchMs);
    const whileDrained = handled.length;
    await resumeRelease(t.db, queues, RELEASE, op);
    await until('the job runs after resume', () => handled.length > 0);
    return { pauseKept, whileDrained, afterResume: handled.length };
  } finally {
    drain.close();
    pg.close();
    await worker.close(true);
    await queues.close();
    redis.disconnect();
  }
}

describe('a drain is held by the ledger, not only by Redis', () => {
  it('after Redis restarts empty (the pause forgotten), no job of the drained release runs until queues resume', async () => {
    const r1 = await drainThenLoseRedis(3000);
    expect(r1.pauseKept).toBe(false); // the fault is real: Redis no longer knows of the drain
    expect(r1.whileDrained).toBe(0);
    expect(r1.afterResume).toBe(1);
    const events = await t.db
      .selectFrom('audit_outbox')
      .select((eb) => eb.ref('event', '->>').key('outcome').as('outcome'))
      .where((eb) => eb(eb.ref('event', '->>').key('type'), '=', 'queues.resumed'))
      .execute();
    expect(events.map((e) => e.outcome)).toEqual(['was_draining']);
  }, 60_000);

  it('control removed: without the drain gate, the job runs as soon as Redis has forgotten the pause', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_DRAIN_GATE: '1' });
    resetTestFaultsForTests();
    try {
      const r2 = await drainThenLoseRedis(3000, { runsWhileDrained: true });
      expect(r2.pauseKept).toBe(false);
      expect(r2.whileDrained).toBe(1);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_DRAIN_GATE;
      resetTestFaultsForTests();
    }
  }, 60_000);
});

/** The `gatehouse` CLI as a process on this test's database, private Redis and `prefix`. */
function cli(args: string[], prefix: string, token: string, redisUrl = r.url): Promise<CliRun> {
  return runCli(args, {
    RELEASES_DIR: resolve(repoRoot, 'releases'),
    POLICY_DIR: resolve(repoRoot, 'policy'),
    DATABASE_URL: t.url,
    REDIS_URL: redisUrl,
    QUEUE_PREFIX: prefix,
    GATEHOUSE_AUDIT_HMAC_KEY: op.hmacKey,
    GATEHOUSE_TOKEN: token,
  });
}

describe('undoing a drain', () => {
  it('`release activate` of a drained release clears the mark and resumes its queues in Redis; `queues resume` does both too', async () => {
    const prefix = testQueuePrefix();
    const ops = await tokenFor('ops-gus', 'local-auth-secret-change-me');
    const redis = new Redis(r.url, { maxRetriesPerRequest: null });
    const queues = new QueueRegistry(redis, prefix);
    const turns = queues.get(queueName('turns', RELEASE));
    const draining = async () =>
      (await t.db.selectFrom('releases').select('draining').where('id', '=', RELEASE).executeTakeFirstOrThrow()).draining;
    try {
      for (const undo of [
        ['release', 'activate', RELEASE],
        ['queues', 'resume', '--release', RELEASE],
      ]) {
        const drained = await cli(['queues', 'drain', '--release', RELEASE], prefix, ops);
        expect(drained.code, drained.out).toBe(0);
        expect([await draining(), await turns.isPaused()]).toEqual([true, true]);
        const undone = await cli(undo, prefix, ops);
        expect(undone.code, undone.out).toBe(0);
        expect([undo.join(' '), await draining(), await turns.isPaused()]).toEqual([undo.join(' '), false, false]);
      }
    } finally {
      await queues.close();
      redis.disconnect();
    }
  }, 120_000);

  it('`release activate` with Redis unreachable still activates, says the queues were not resumed, and exits 4 (never hangs)', async () => {
    const ops = await tokenFor('ops-gus', 'local-auth-secret-change-me');
    const started = Date.now();
    const res = await cli(['release', 'activate', RELEASE], testQueuePrefix(), ops, `redis://127.0.0.1:${await freePort()}`);
    expect(res.code, res.out).toBe(4);
    expect(res.out).toContain(`${RELEASE} is the active release`);
    expect(res.out).toContain(`run gatehouse queues resume --release ${RELEASE}`);
    expect(Date.now() - started).toBeLessThan(60_000);
    const row = await t.db.selectFrom('releases').select(['status', 'draining']).where('id', '=', RELEASE).executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'active', draining: false });
  }, 120_000);
});
