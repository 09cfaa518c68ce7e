import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb } from '@gatehouse/ledger';
import { queueName, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { createLogger } from '../src/logger.ts';
import { createRedis, createWorker, QueueRegistry } from '../src/queues.ts';
import { PostgresGate } from '../src/postgres-gate.ts';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// A job that waits for a pool connection past the bound (ADR 0787) — a starved pool, or a
// transaction waiting for a second connection of a full pool — fails with node-postgres's "timeout
// exceeded when trying to connect". Postgres itself answers, so the gate's probe succeeds; the job
// still goes back unattempted, like one that met an outage: its transaction rolled back, and a
// one-attempt job does not reach the dead letter for a wait on its own process's pool.

const log = createLogger('pool-acquire-defer-test');
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
});
afterAll(async () => {
  await t?.drop();
});

/** Polls `cond` every 50 ms until it holds or 30 s pass. @throws Error naming `what`. */
async function until(what: string, cond: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    if (await cond()) return;
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('a job whose wait for a pool connection passes the bound', () => {
  it('goes back unattempted, then runs again and completes', async () => {
    const prefix = testQueuePrefix();
    // One connection, a 300 ms bound: the first run's second checkout cannot be served.
    const db = createDb(t.url, 1, () => gate.noteClientFault(), { connectTimeoutMs: 300 });
    const gate = new PostgresGate(db, log, { pollMs: 200, deferMs: 300 });
    const queues = new QueueRegistry(createRedis(TEST_REDIS_URL, log), prefix, log);
    const exhausted: string[] = [];
    const runs: string[] = [];
    const worker = createWorker(
      turnsQueue,
      async (p: TurnJob) => {
        runs.push(p.workflowId);
        await db.transaction().execute(async (trx) => {
          await sql`SELECT 1`.execute(trx);
          // The first run waits for a second connection while its transaction holds the only one.
          await sql`SELECT 1`.execute(runs.length === 1 ? db : trx);
        });
        return 'ok';
      },
      { release: 'rel-1', prefix, redisUrl: TEST_REDIS_URL, log, gate, onExhausted: async (p) => void exhausted.push(p.workflowId) },
    );
    try {
      const wf = randomUUID();
      const queue = queues.get(queueName('turns', 'rel-1'));
      const added = await queue.add(
        turnsQueue.jobName,
        { release: 'rel-1', workflowId: wf, round: 1 },
        { attempts: 1, jobId: randomUUID() },
      );
      const state = async (): Promise<string> => ((await queue.getJob(added.id!)) ?? { getState: async () => 'missing' }).getState();
      await until('the job to end', async () => ['completed', 'failed'].includes(await state()));
      const job = await queue.getJob(added.id!);
      expect({ state: await job!.getState(), attemptsMade: job!.attemptsMade }).toEqual({ state: 'completed', attemptsMade: 1 });
      expect(runs).toEqual([wf, wf]);
      expect(exhausted).toEqual([]);
    } finally {
      gate.close();
      await worker.close();
      await queues.close();
      await db.destroy();
      await dropQueuePrefix(TEST_REDIS_URL, prefix).catch(() => {});
    }
  }, 40_000);
});
