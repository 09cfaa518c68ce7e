import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import {
  createTestDatabase,
  freePort,
  TcpCut,
  testQueuePrefix,
  TEST_REDIS_URL,
  timedGet,
  type TestDatabase,
  type TimedAnswer,
} from '@gatehouse/test-harness';
import { createOpsApp, createQueueBoard } from '../src/index.ts';

// During a Postgres outage (connections refused: the ledger reached through a TCP proxy this test
// cuts, never the shared server) the dashboard's pages answered the JSON 503 of the API. A browser
// asking for a page gets an HTML 503 page naming what is unreachable and what to check; `/api`
// keeps its JSON error (ADR 0060, amended).

const SECRET = 'local-auth-secret-change-me';
let t: TestDatabase;
let cut: TcpCut;
let db: Db;
let redis: Redis;
let queues: QueueRegistry;
let server: Server;
let url: string;
let ops: string;
let databaseUrl: string;

beforeAll(async () => {
  t = await createTestDatabase();
  const target = new URL(t.url);
  cut = new TcpCut(await freePort(), { host: target.hostname, port: Number(target.port || 5432) });
  await cut.open();
  target.port = String(cut.port);
  databaseUrl = target.toString();
  db = createDb(databaseUrl, 2);
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  queues = new QueueRegistry(redis, testQueuePrefix());
  const app = createOpsApp({
    db,
    databaseUrl,
    log: createLogger('ops-ledger-outage-test'),
    board: createQueueBoard({ db, redis, queues }),
    // The real revocation check: it reads the ledger before any route (fail closed, ADR 0695).
    verifier: { secret: SECRET },
    auditHmacKey: 'k',
    localSecret: SECRET,
    secureCookie: false,
    responseDeadlineMs: 5000,
  });
  const listening = await listen(app, 0, '127.0.0.1');
  server = listening.server;
  url = `http://127.0.0.1:${listening.port}`;
  ops = await tokenFor('ops-gus', SECRET);
  // Up first: the page answers from the ledger.
  const up = await get('/ops', { accept: 'text/html' });
  expect(up.status, up.text).toBe(200);
  await cut.cut();
}, 60_000);
afterAll(async () => {
  await cut?.cut();
  if (server) await closeServer(server);
  await queues?.close();
  redis?.disconnect();
  await db?.destroy().catch(() => undefined);
  await t?.drop();
});

/** GET `path` as ops-gus (bearer token) with extra `headers`. */
const get = (path: string, headers: Record<string, string> = {}): Promise<TimedAnswer> =>
  timedGet(`${url}${path}`, { authorization: `Bearer ${ops}`, ...headers });

describe('the ops dashboard while Postgres refuses connections', () => {
  it('a page (/ops, as a browser asks for it or not) answers an HTML 503 page naming Postgres, its host:port and what to check', async () => {
    const target = new URL(databaseUrl);
    for (const headers of [{ accept: 'text/html,application/xhtml+xml,*/*;q=0.8' }, {}] as Array<Record<string, string>>) {
      const r = await get('/ops', headers);
      expect(r.status, r.text).toBe(503);
      expect(r.type).toMatch(/^text\/html/);
      expect(r.retryAfter).toBe('5');
      expect(r.text).toContain('Postgres is unreachable');
      expect(r.text).toContain(`pg_isready -h ${target.hostname} -p ${target.port}`);
      expect(r.text).toContain('/readyz');
      expect(r.text).not.toContain('dependency_unavailable');
    }
  }, 30_000);

  it('/api keeps its JSON 503 dependency_unavailable, whatever the Accept header', async () => {
    for (const headers of [{ accept: 'text/html' }, { accept: 'application/json' }]) {
      const r = await get('/api/overview', headers);
      expect(r.status, r.text).toBe(503);
      expect(r.type).toMatch(/^application\/json/);
      expect((JSON.parse(r.text) as { error: { reason: string } }).error.reason).toBe('dependency_unavailable');
    }
  }, 30_000);
});
