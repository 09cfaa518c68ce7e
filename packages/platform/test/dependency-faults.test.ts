import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from 'bullmq';
import { sql } from 'kysely';
import { createDb } from '@gatehouse/ledger';
import { queueName, turnsQueue, type TurnJob, resetTestFaultsForTests } from '@gatehouse/contracts';
import { createLogger } from '../src/logger.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import {
  createTestDatabase,
  dropQueuePrefix,
  startPrivatePostgres,
  startPrivateRedis,
  testQueuePrefix,
  TEST_REDIS_URL,
  type PrivatePostgres,
  type TestDatabase,
} from '@gatehouse/test-harness';

// Workers over a Postgres that goes away: a job that meets the outage (before its handler, or
// between two statements of it) goes back unattempted and runs once Postgres answers again, so a
// one-attempt job never reaches the dead letter; without the gate it does. And workers over a
// Redis that restarts take jobs again afterwards.

const log = createLogger('dependency-faults-test');
let pg: PrivatePostgres;
let t: TestDatabase;
beforeAll(async () => {
  pg = await startPrivatePostgres();
  t = await createTestDatabase({ server: pg.url, migrate: false });
});
afterAll(async () => {
  await t?.db.destroy();
  await pg?.destroy();
});

/** Polls `cond` every 50 ms until it returns a value or 60 s pass. @throws Error naming `what`. */
async function until<T>(what: string, cond: () => Promise<T | undefined | false>): Promise<T> {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    const v = await cond();
    if (v !== undefined && v !== false) return v;
  }
  throw new Error(`timed out waiting for ${what}`);
}

interface Rig {
  worker: Worker;
  gate: PostgresGate;
  queues: QueueRegistry;
  exhausted: string[];
  runs: Map<string, number>;
  /** Workflows whose first run waits on this promise between the two statements of its transaction. */
  holds: Map<string, { reached: () => void; release: Promise<void> }>;
  add: (workflowId: string) => Promise<string>;
  state: (jobId: string) => Promise<{ state: string; attemptsMade: number }>;
  close: () => Promise<void>;
}

function rig(redisUrl = TEST_REDIS_URL, logger = log): Rig {
  const prefix = testQueuePrefix();
  // Wired as the service context wires it: a client that loses its connection tells the gate.
  const db = createDb(t.url, 5, () => gate.noteClientFault());
  const gate = new PostgresGate(db, log, { pollMs: 200, deferMs: 300 });
  const queues = new QueueRegistry(createRedis(redisUrl, logger), prefix, logger);
  const r: Omit<Rig, 'worker'> = {
    gate,
    queues,
    exhausted: [],
    runs: new Map(),
    holds: new Map(),
    add: async (workflowId) => {
      const job: TurnJob = { release: 'rel-1', workflowId, round: 1 };
      const added = await queues.get(queueName('turns', 'rel-1')).add(turnsQueue.jobName, job, { attempts: 1, jobId: randomUUID() });
      return added.id!;
    },
    state: async (jobId) => {
      const job = await queues.get(queueName('turns', 'rel-1')).getJob(jobId);
      return { state: job ? await job.getState() : 'missing', attemptsMade: job?.attemptsMade ?? -1 };
    },
    close: async () => {
      gate.close();
      await worker.close();
      await queues.close();
      await db.destroy();
      await dropQueuePrefix(redisUrl, prefix).catch(() => {});
    },
  };
  const worker = createWorker(
    turnsQueue,
    async (p: TurnJob) => {
      const n = (r.runs.get(p.workflowId) ?? 0) + 1;
      r.runs.set(p.workflowId, n);
      // One transaction: its client stays checked out across the hold, as a service's would.
      await db.transaction().execute(async (trx) => {
        await sql`SELECT 1`.execute(trx);
        const hold = r.holds.get(p.workflowId);
        if (hold && n === 1) {
          hold.reached();
          await hold.release;
        }
        await sql`SELECT 1`.execute(trx);
      });
      return 'ok';
    },
    { release: 'rel-1', prefix, redisUrl, log: logger, gate, onExhausted: async (p) => void r.exhausted.push(p.workflowId) },
  );
  return { ...r, worker };
}

describe('workers while Postgres is down', () => {
  it('a job taken during the outage goes back unattempted, the worker pauses, and both resume when Postgres answers', async () => {
    const r = rig();
    try {
      await pg.stop();
      const wf = randomUUID();
      const id = await r.add(wf);
      await until('the gate to mark postgres down', async () => !r.gate.state.up);
      await until('the worker to pause', async () => r.worker.isPaused());
      expect(await r.state(id)).toEqual({ state: 'delayed', attemptsMade: 0 });
      await pg.start();
      await until('the job to complete', async () => (await r.state(id)).state === 'completed');
      expect(r.worker.isPaused()).toBe(false);
      expect(r.exhausted).toEqual([]);
      expect(r.runs.get(wf)).toBe(1);
    } finally {
      await r.close();
    }
  });

  it('a handler whose connection is lost between two statements is handed back, then runs again', async () => {
    const r = rig();
    try {
      const wf = randomUUID();
      let reached!: () => void;
      const atHold = new Promise<void>((res) => (reached = res));
      let release!: () => void;
      r.holds.set(wf, { reached, release: new Promise<void>((res) => (release = res)) });
      const id = await r.add(wf);
      await atHold;
      await pg.restart({ mode: 'fast' }); // the handler's pooled client dies with the old server
      release();
      await until('the job to complete', async () => (await r.state(id)).state === 'completed');
      expect(r.runs.get(wf)).toBe(2);
      expect(r.exhausted).toEqual([]);
    } finally {
      await r.close();
    }
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_PG_GATE=1): the same outage spends the attempt into the dead letter', async () => {
    const saved = process.env.GATEHOUSE_TEST_DISABLE_PG_GATE;
    const savedEnv = process.env.GATEHOUSE_ENV;
    process.env.GATEHOUSE_TEST_DISABLE_PG_GATE = '1';
    process.env.GATEHOUSE_ENV = 'test';
    resetTestFaultsForTests();
    const r = rig();
    try {
      await pg.stop();
      const wf = randomUUID();
      const id = await r.add(wf);
      await until('the job to fail', async () => (await r.state(id)).state === 'failed');
      await until('the dead letter', async () => r.exhausted.length > 0);
      expect(r.exhausted).toEqual([wf]);
    } finally {
      await pg.start();
      await r.close();
      if (saved === undefined) delete process.env.GATEHOUSE_TEST_DISABLE_PG_GATE;
      else process.env.GATEHOUSE_TEST_DISABLE_PG_GATE = saved;
      if (savedEnv === undefined) delete process.env.GATEHOUSE_ENV;
      else process.env.GATEHOUSE_ENV = savedEnv;
      resetTestFaultsForTests();
    }
  });
});

describe('workers while Redis restarts', () => {
  it('the connection errors are handled and logged once per 30 s each, and the worker takes jobs again afterwards', async () => {
    const redis = await startPrivateRedis();
    const url = redis.url;
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown): void => void uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    let lines = '';
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines += chunk.toString();
        done();
      },
    });
    const r = rig(url, createLogger('dependency-faults-test', sink));
    try {
      const first = await r.add(randomUUID());
      await until('the first job', async () => (await r.state(first)).state === 'completed');
      await redis.kill();
      await until(
        'the worker to see the connection drop',
        async () => r.queues.connection instanceof Object && (r.queues.connection as { status: string }).status !== 'ready',
      );
      // Down for 3 s: the worker's blocking reads fail again and again meanwhile.
      await new Promise((done) => setTimeout(done, 3000));
      await redis.restartEmpty();
      const second = await until('the queue to accept a job again', async () => r.add(randomUUID()).catch(() => undefined));
      await until('the second job', async () => (await r.state(second)).state === 'completed');
      expect(uncaught).toEqual([]);
      const logged = lines
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { msg: string; err?: string });
      const errors = logged.filter((l) => l.msg === 'worker error').map((l) => l.err);
      expect(errors.length, 'the worker reported the outage').toBeGreaterThan(0);
      expect(errors, 'each error once in the interval, not once per failed read').toEqual([...new Set(errors)]);
      const queueErrors = logged.filter((l) => l.msg === 'queue connection error').map((l) => l.err);
      expect(queueErrors, 'the queue reports its connection errors through the log, each once').toEqual([...new Set(queueErrors)]);
      expect(r.queues.get(queueName('turns', 'rel-1')).listenerCount('error')).toBe(1);
    } finally {
      process.off('uncaughtException', onUncaught);
      await r.close();
      await redis.stop();
    }
  });
});
