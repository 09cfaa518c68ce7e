import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queueName, turnsQueue, type TurnJob } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction, type OutboxRow } from '@gatehouse/ledger';
import { createLogger } from '../src/logger.ts';
import { OutboxRelay } from '../src/outbox-relay.ts';
import { createRedis, QueueRegistry } from '../src/queues.ts';
import { createTestDatabase, startPrivateRedis, testQueuePrefix, type PrivateRedis, type TestDatabase } from '@gatehouse/test-harness';

// A job the queue store could not take waits in the outbox until the sweep publishes it: that
// wait is an outage of Redis, not the run's working time, so the published job carries it
// (docs/decisions/0110-outage-time.md). Real Postgres and a private Redis the test stops.

let t: TestDatabase;
let redis: PrivateRedis;
let queues: QueueRegistry;
let relay: OutboxRelay;
const prefix = testQueuePrefix();

beforeAll(async () => {
  t = await createTestDatabase();
  redis = await startPrivateRedis();
  queues = new QueueRegistry(createRedis(redis.url), prefix);
  const log = createLogger('test');
  log.level = 'silent';
  relay = new OutboxRelay(t.db, queues, log);
});
afterAll(async () => {
  await queues?.close();
  await redis?.stop();
  await t?.drop();
});

/** Writes one turn job to the outbox (as a service's transaction would) and returns its row. */
async function writeTurn(workflowId: string, extra: Partial<TurnJob> = {}): Promise<OutboxRow> {
  return inTransaction(t.db, (trx) => enqueueInTransaction(trx, turnsQueue, { release: 'rel-1', workflowId, round: 1, ...extra }));
}

describe('the outbox sweep after a queue-store outage', () => {
  it('publishes the rows Redis could not take, each marked as an outage of redis since it was written', async () => {
    await redis.kill();
    const row = await writeTurn('00000000-0000-4000-8000-000000000001');
    const kept = await writeTurn('00000000-0000-4000-8000-000000000002', { outage: { dependency: 'model', sinceMs: 1 } });
    await relay.publish([row, kept], 200); // Redis is down: nothing is published, the rows stay for the sweep
    const written = await t.db
      .selectFrom('outbox')
      .select(['id', 'created_at', 'published_at'])
      .where('id', '=', row.id)
      .executeTakeFirstOrThrow();
    expect(written.published_at).toBeNull();

    await redis.restartEmpty();
    let published = 0;
    for (const until = Date.now() + 30_000; published < 2 && Date.now() < until;) {
      published += await relay.sweep(0).catch(() => 0); // the registry reconnects on its own
      if (published < 2) await new Promise((r) => setTimeout(r, 200));
    }
    expect(published).toBe(2);
    const q = queues.get(queueName('turns', 'rel-1'));
    const job = await q.getJob(row.job_id);
    expect(job?.data.outage).toEqual({ dependency: 'redis', sinceMs: written.created_at.getTime() });
    expect((await q.getJob(kept.job_id))?.data.outage).toEqual({ dependency: 'model', sinceMs: 1 });
  });
});
