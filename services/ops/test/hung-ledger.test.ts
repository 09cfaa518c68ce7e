import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import { startHangableProxy, testQueuePrefix, TEST_REDIS_URL, type HangableProxy } from '@gatehouse/test-harness';
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
    verifier: { secret: SECRET },
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

/** GET `path` as ops-gus; status, content type, Retry-After, text and time taken (status 0: no answer in 8 s). */
async function timedGet(path: string): Promise<{ status: number; type: string; retryAfter: string | null; text: string; ms: number }> {
  const started = Date.now();
  try {
    const r = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ops}` }, signal: AbortSignal.timeout(8000) });
    return {
      status: r.status,
      type: r.headers.get('content-type') ?? '',
      retryAfter: r.headers.get('retry-after'),
      text: await r.text(),
      ms: Date.now() - started,
    };
  } catch {
    return { status: 0, type: '', retryAfter: null, text: '', ms: Date.now() - started };
  }
}

describe('the ops dashboard over a ledger that never answers', () => {
  it('the overview page answers a 503 page within the deadline instead of hanging', async () => {
    const r = await timedGet('/ops');
    expect(r.status, 'no answer: the dashboard hung').toBe(503);
    expect(r.type).toMatch(/^text\/html/);
    expect(r.retryAfter).toBe('5');
    expect(r.text).toContain('The ledger is not answering');
    expect(r.ms).toBeLessThan(DEADLINE_MS + 2000);
  }, 20_000);

  it('the JSON API answers 503 dependency_unavailable within the deadline', async () => {
    const r = await timedGet('/api/overview');
    expect(r.status, 'no answer: the API hung').toBe(503);
    expect(r.retryAfter).toBe('5');
    expect((JSON.parse(r.text) as { error: { reason: string } }).error.reason).toBe('dependency_unavailable');
    expect(r.ms).toBeLessThan(DEADLINE_MS + 2000);
  }, 20_000);
});
