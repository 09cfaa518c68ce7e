import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { turnsQueue } from '@gatehouse/contracts';
import { createPool, enqueueInTransaction, inTransaction, type Db, type OutboxRow } from '@gatehouse/ledger';
import { createTestDatabase, testQueuePrefix, TEST_REDIS_URL, dropQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { createLogger } from '../src/logger.ts';
import { MARK_DELAY_MS, OutboxRelay } from '../src/outbox-relay.ts';
import { createRedis, QueueRegistry } from '../src/queues.ts';

// docs/decisions/0370-batched-outbox-marks.md: a published row's `published_at` is written by one
// batched UPDATE shortly after the publish, off the publisher's path, and never lost on shutdown.

let t: TestDatabase;
let counted: Db;
let queues: QueueRegistry;
const statements: string[] = [];
const prefix = testQueuePrefix();

beforeAll(async () => {
  t = await createTestDatabase();
  const pool: pg.Pool = createPool(t.url, 8);
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => unknown;
    (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
      statements.push(String(typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text));
      return query(...args);
    };
  });
  counted = new Kysely({ dialect: new PostgresDialect({ pool }) }) as Db;
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
});
afterAll(async () => {
  await counted?.destroy();
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

const relayOver = (db: Db): OutboxRelay => {
  const log = createLogger('test');
  log.level = 'silent';
  return new OutboxRelay(db, queues, log);
};

async function writeTurns(n: number): Promise<OutboxRow[]> {
  return Promise.all(
    Array.from({ length: n }, () =>
      inTransaction(t.db, (trx) => enqueueInTransaction(trx, turnsQueue, { release: 'rel-1', workflowId: randomUUID(), round: 1 })),
    ),
  );
}

const unmarked = async (rows: OutboxRow[]) =>
  (
    await t.db
      .selectFrom('outbox')
      .select('id')
      .where(
        'id',
        'in',
        rows.map((r) => r.id),
      )
      .where('published_at', 'is', null)
      .execute()
  ).length;

describe('batched outbox marks', () => {
  it('20 publishes at once are marked by one UPDATE within the mark delay, each job in the queue', async () => {
    const relay = relayOver(counted);
    const rows = await writeTurns(20);
    statements.length = 0;
    await Promise.all(rows.map((r) => relay.publish([r])));
    for (const r of rows) expect(await queues.get(r.queue).getJob(r.job_id)).toBeTruthy();
    await new Promise((res) => setTimeout(res, MARK_DELAY_MS * 4));
    expect(await unmarked(rows)).toBe(0);
    expect(statements.filter((s) => /^update "outbox" set "published_at"/.test(s))).toHaveLength(1);
    await relay.stop();
  });

  it('stop() writes the marks still pending', async () => {
    const relay = relayOver(t.db);
    const rows = await writeTurns(3);
    await relay.publish(rows);
    await relay.stop();
    expect(await unmarked(rows)).toBe(0);
  });
});
