import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { AbuseLimiter, closeServer, createLogger, listen, QueueRegistry } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { createOpsApp, createQueueBoard } from '../src/index.ts';

// The ops dashboard audits each refusal of a known caller who is not an operator (`ops.refused`).
// Any valid token of the directory could therefore write the audit chain at the rate it sends
// requests. Those refusals count against the sign-in limits (per user, per tenant, in Redis):
// past them the caller gets 429 with Retry-After and nothing more is audited (ADR 0725).

const SECRET = 'local-auth-secret-change-me';
const PER_USER = 3;
let tdb: TestDatabase;
let server: Server;
let url: string;
let redis: Redis;
let queues: QueueRegistry;
const prefix = testQueuePrefix();

beforeAll(async () => {
  tdb = await createTestDatabase();
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  queues = new QueueRegistry(redis, prefix);
  const log = createLogger('ops-refusal-limit-test');
  log.level = 'silent';
  const app = createOpsApp({
    db: tdb.db,
    log,
    board: createQueueBoard({ db: tdb.db, redis, queues }),
    verifier: { secret: SECRET },
    auditHmacKey: 'k',
    localSecret: SECRET,
    secureCookie: false,
    signInLimiter: new AbuseLimiter(redis, prefix, { surface: 'signin', perUser: PER_USER, perTenant: 100, windowSeconds: 60 }),
  });
  const listening = await listen(app, 0, '127.0.0.1');
  server = listening.server;
  url = `http://127.0.0.1:${listening.port}`;
});
afterAll(async () => {
  if (server) await closeServer(server);
  await queues?.close();
  redis?.disconnect();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await tdb?.drop();
});

const refusalsAudited = async () =>
  (await tdb.db.selectFrom('audit_outbox').select('event').execute()).filter((r) => (r.event as { type: string }).type === 'ops.refused')
    .length;

describe('refusals of non-operators', () => {
  it(`a rep's token, 10 requests: ${PER_USER} refused 403 and audited, the rest 429 with Retry-After and not audited`, async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    for (let i = 0; i < 10; i++) {
      const r = await fetch(`${url}/api/webhooks`, { headers: { authorization: `Bearer ${rep}` } });
      statuses.push(r.status);
      if (r.status === 429) retryAfter = r.headers.get('retry-after');
      await r.arrayBuffer();
    }
    expect(statuses).toEqual([...Array(PER_USER).fill(403), ...Array(10 - PER_USER).fill(429)]);
    expect(Number(retryAfter)).toBeGreaterThan(0);
    expect(await refusalsAudited()).toBe(PER_USER);
    // An operator is not counted: the dashboard still answers ops-gus.
    const ops = await tokenFor('ops-gus', SECRET);
    expect((await fetch(`${url}/api/webhooks`, { headers: { authorization: `Bearer ${ops}` } })).status).toBe(200);
  });
});
