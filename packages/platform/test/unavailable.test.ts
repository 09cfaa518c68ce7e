import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createDb } from '@gatehouse/ledger';
import { createHttpApp, finishApp, READY_CHECK_TIMEOUT_MS } from '../src/http.ts';
import { closeServer, listen } from '../src/http-server.ts';
import { createLogger } from '../src/logger.ts';
import { OutboxRelay } from '../src/outbox-relay.ts';
import { QueueRegistry } from '../src/queues.ts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// A dependency that stops answering (Redis down: ioredis queues commands and retries forever)
// must not hold a probe or an API request: readiness fails in bounded time, and a request that
// committed outbox rows answers while the publish goes on in the background (the sweep retries).

let t: TestDatabase;
let deadRedis: Redis;
beforeAll(async () => {
  t = await createTestDatabase();
  // Nothing listens on port 1: the connection never becomes ready and commands wait.
  deadRedis = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: null, lazyConnect: false });
  deadRedis.on('error', () => {});
});
afterAll(async () => {
  deadRedis?.disconnect();
  await t?.drop();
});

describe('an unavailable dependency fails in bounded time', () => {
  it('/readyz answers 503 naming only the check that hangs', { timeout: 30_000 }, async () => {
    const app = createHttpApp('probe-test', {
      postgres: async () => {
        await t.db.selectNoFrom((eb) => eb.val(1).as('one')).execute();
      },
      redis: async () => {
        await deadRedis.ping(); // never settles while the server is away
      },
    });
    const { server, port } = await listen(app, 0);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect(res.status).toBe(503);
      const body = (await res.json()) as { ready: boolean; failing: Record<string, string> };
      expect(body).toEqual({ ready: false, service: 'probe-test', failing: { redis: `timed out after ${READY_CHECK_TIMEOUT_MS} ms` } });
    } finally {
      await closeServer(server);
    }
  });

  it(
    'OutboxRelay.publish returns while the queue is unreachable; the row stays unpublished for the sweep',
    { timeout: 30_000 },
    async () => {
      const queues = new QueueRegistry(deadRedis, 'ghtest-unavailable');
      const relay = new OutboxRelay(t.db, queues, createLogger('test'));
      const row = await t.db
        .insertInto('outbox')
        .values({
          queue: 'turns.rel-1',
          job_name: 'turn',
          job_id: 'turn_probe_1',
          payload: JSON.stringify({ release: 'rel-1' }),
          release_id: 'rel-1',
        })
        .returning(['id', 'queue', 'job_name', 'job_id', 'payload'])
        .executeTakeFirstOrThrow();
      await relay.publish([row as never], 500);
      const stored = await t.db.selectFrom('outbox').select('published_at').where('id', '=', row.id).executeTakeFirstOrThrow();
      expect(stored.published_at).toBeNull();
    },
  );

  it(
    'a request whose database is unreachable is answered 503 dependency_unavailable with Retry-After, not 500',
    { timeout: 30_000 },
    async () => {
      const gone = createDb('postgres://postgres@127.0.0.1:1/nowhere', 1);
      const app = createHttpApp('probe-test');
      app.get('/v1/things', async (_req, res) => {
        res.json(await gone.selectNoFrom((eb) => eb.val(1).as('one')).execute());
      });
      finishApp(app, createLogger('test'));
      const { server, port } = await listen(app, 0);
      try {
        const res = await fetch(`http://127.0.0.1:${port}/v1/things`);
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('5');
        expect(((await res.json()) as { error: { reason: string } }).error.reason).toBe('dependency_unavailable');
      } finally {
        await closeServer(server);
        await gone.destroy();
      }
    },
  );
});
