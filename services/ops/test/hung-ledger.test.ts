import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import {
  startHangableProxy,
  testQueuePrefix,
  TEST_REDIS_URL,
  type HangableProxy,
  timedGet,
  type TimedAnswer,
} from '@gatehouse/test-harness';
import { createOpsApp, createQueueBoard } from '../src/index.ts';

// A ledger that accepts connections and never answers (a SIGSTOPped or wedged Postgres) must not
// hold on-call's dashboard: its pages answer a 503 page and its JSON API a 503
// dependency_unavailable within HTTP_RESPONSE_DEADLINE_MS, as intake and approvals do.

const SECRET = 'local-auth-secret-change-me';
const DEADLINE_MS = 800;
let hung: HangableProxy;
let db: Db;
let redis: Redis;
let queues: QueueRegistry;
let server: Server;
let url: string;
let ops: string;

beforeAll(async () => {
  hung = await startHangableProxy(); // no target: nothing ever answers
  db = createDb(`postgres://postgres@127.0.0.1:${hung.port}/gatehouse`, 2);
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  queues = new QueueRegistry(redis, testQueuePrefix());
  const app = createOpsApp({
    db,
    log: createLogger('ops-hung-ledger-test'),
    board: createQueueBoard({ db, redis, queues }),
    // Revocation is not under test here: its check would read the hung ledger before any route
    // (fail closed, ADR 0695); one that reads nothing keeps the routes' own answers observable.
    verifier: { secret: SECRET, revocations: { assertNotRevoked: async () => undefined } },
    auditHmacKey: 'k',
    localSecret: SECRET,
    secureCookie: false,
    responseDeadlineMs: DEADLINE_MS,
  });
  const listening = await listen(app, 0, '127.0.0.1');
  server = listening.server;
  url = `http://127.0.0.1:${listening.port}`;
  ops = await tokenFor('ops-gus', SECRET);
});
afterAll(async () => {
  await hung?.close();
  if (server) await closeServer(server);
  await queues?.close();
  redis?.disconnect();
  await db?.destroy().catch(() => undefined);
});

/** GET `path` of the service under test as its user ({@link timedGet}). */
const get = (path: string): Promise<TimedAnswer> => timedGet(`${url}${path}`, { authorization: `Bearer ${ops}` });

describe('the ops dashboard over a ledger that never answers', () => {
  it('the overview page answers a 503 page within the deadline instead of hanging', async () => {
    const r = await get('/ops');
    expect(r.status, 'no answer: the dashboard hung').toBe(503);
    expect(r.type).toMatch(/^text\/html/);
    expect(r.retryAfter).toBe('5');
    expect(r.text).toContain('The ledger is not answering');
    expect(r.ms).toBeLessThan(DEADLINE_MS + 2000);
  }, 20_000);

  it('the JSON API answers 503 dependency_unavailable within the deadline', async () => {
    const r = await get('/api/overview');
    expect(r.status, 'no answer: the API hung').toBe(503);
    expect(r.retryAfter).toBe('5');
    expect((JSON.parse(r.text) as { error: { reason: string } }).error.reason).toBe('dependency_unavailable');
    expect(r.ms).toBeLessThan(DEADLINE_MS + 2000);
  }, 20_000);

  it('an /api query parameter the operation does not take is 400 unknown_query_parameter before the ledger is read; documented ones and pages pass (ADR 0688)', async () => {
    const typo = await get('/api/workflows?limt=10');
    expect(typo.status).toBe(400);
    const { error } = JSON.parse(typo.text) as { error: { reason: string; message: string } };
    expect(error.reason).toBe('unknown_query_parameter');
    expect(error.message).toContain('"limt"');
    expect(error.message).toMatch(/it takes state, limit/);
    expect((await get('/api/queues?state=paused')).status).toBe(400); // takes none
    expect((await get('/api/workflows?limit=10')).status).toBe(503);
    expect((await get('/ops?limt=10')).status).toBe(503);
  }, 30_000);
});
