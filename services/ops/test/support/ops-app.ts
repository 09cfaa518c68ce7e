import type { Server } from 'node:http';
import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';
import type { Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { createOpsApp, createQueueBoard, type OpsAppOptions } from '../../src/index.ts';

/** The local user-token secret the ops app of {@link opsAppFixture} verifies with. */
export const SECRET = 'local-auth-secret-change-me';

/** What a test file reads of its ops app, once the file's `beforeAll` ran. */
export interface OpsAppFixture {
  /** The app's base URL (`http://127.0.0.1:<port>`). */
  url: () => string;
  db: () => Db;
}

/**
 * A test file's ops app (the real routers over its own database, Redis at `TEST_REDIS_URL` under
 * a key prefix of its own), listening on an ephemeral loopback port: started before the file's
 * tests, closed after, its database dropped and its keys deleted. `extra` adds or replaces
 * options; it is given the file's database, Redis connection and key prefix (for a limiter or a
 * queue board of its own).
 */
export function opsAppFixture(
  logName: string,
  extra: (ctx: { db: Db; redis: Redis; prefix: string }) => Partial<OpsAppOptions> = () => ({}),
): OpsAppFixture {
  const prefix = testQueuePrefix();
  let tdb: TestDatabase | undefined;
  let redis: Redis | undefined;
  let queues: QueueRegistry | undefined;
  let server: Server | undefined;
  let base = '';
  beforeAll(async () => {
    tdb = await createTestDatabase();
    redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
    // Ready before the first request: a limiter counts in memory while Redis is not ready yet
    // (its insurance limiter), and a count split across the two let one request too many through.
    await redis.ping();
    queues = new QueueRegistry(redis, prefix);
    const log = createLogger(logName);
    log.level = 'silent';
    const app = createOpsApp({
      db: tdb.db,
      log,
      board: createQueueBoard({ db: tdb.db, redis, queues }),
      verifier: { secret: SECRET },
      auditHmacKey: 'k',
      localSecret: SECRET,
      secureCookie: false,
      ...extra({ db: tdb.db, redis, prefix }),
    });
    const listening = await listen(app, 0, '127.0.0.1');
    server = listening.server;
    base = `http://127.0.0.1:${listening.port}`;
  });
  afterAll(async () => {
    if (server) await closeServer(server);
    await queues?.close();
    redis?.disconnect();
    await dropQueuePrefix(TEST_REDIS_URL, prefix);
    await tdb?.drop();
  });
  return { url: () => base, db: () => tdb!.db };
}
