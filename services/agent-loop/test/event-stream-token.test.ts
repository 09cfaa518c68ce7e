import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, type OutboxRelay } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, startHangableProxy, timedGet, type HangableProxy, type TestDatabase } from '@gatehouse/test-harness';
import { createIntakeApp, WorkflowEventHub } from '../src/index.ts';

/**
 * `GET /v1/workflows/:id/events` and its bearer token (docs/decisions/0688-every-bearer-token-expires.md):
 * an open stream ends when its token expires, with a last `stream.closed` event naming why, and
 * frees its slot; before the stream opens, a ledger that never answers gets the app's response
 * deadline (503), as every other route. Real Postgres, real HTTP, the service's own app.
 */
const SECRET = 'event-stream-token-test-secret-0123';
const REP = { sub: 'rep-ana', tenant: 'quillfeather', roles: ['support_rep'] };
const DEADLINE_MS = 800;
const log = createLogger('event-stream-token-test', { write: () => true } as never);
const relay = { publish: async () => undefined } as unknown as OutboxRelay;

let t: TestDatabase;
let hung: HangableProxy;
let hungDb: Db;
const servers: Server[] = [];
let live = '';
let stalled = '';
let workflowId = '';

/** The intake app over `db`, listening; resolves with its base URL. */
async function intakeOver(db: Db, url: string): Promise<string> {
  const app = createIntakeApp({
    db,
    relay,
    release: 'rel-1',
    auditHmacKey: 'event-stream-token-test-audit-key-01',
    packs: () => {
      throw new Error('not reached: no ticket is submitted');
    },
    verifier: { secret: SECRET },
    log,
    responseDeadlineMs: DEADLINE_MS,
    // One stream per user: a second stream opens only once the first freed its slot.
    events: { hub: new WorkflowEventHub(url, log), pollMs: 1000, heartbeatMs: 15_000, limits: { perUser: 1, perTenant: 10 } },
  });
  const l = await listen(app, 0, '127.0.0.1');
  servers.push(l.server);
  return `http://127.0.0.1:${l.port}`;
}

beforeAll(async () => {
  t = await createTestDatabase();
  workflowId = (await createAction(t.db, { orderId: 'O-1001' })).workflowId;
  live = await intakeOver(t.db, t.url);
  hung = await startHangableProxy(); // no target: a ledger that accepts and never answers
  const hungUrl = `postgres://postgres@127.0.0.1:${hung.port}/gatehouse`;
  hungDb = createDb(hungUrl, 2);
  stalled = await intakeOver(hungDb, hungUrl);
});
afterAll(async () => {
  for (const s of servers) await closeServer(s).catch(() => undefined);
  await hung?.close();
  await hungDb?.destroy().catch(() => undefined);
  await t?.drop();
});

describe('an event stream and its token', () => {
  it('ends at the token’s exp with a stream.closed event naming token_expired, and frees its slot', async () => {
    const shortLived = await signUserToken(REP, SECRET, 2);
    const res = await fetch(`${live}/v1/workflows/${workflowId}/events`, {
      headers: { authorization: `Bearer ${shortLived}` },
      signal: AbortSignal.timeout(15_000),
    });
    expect(res.status).toBe(200);
    // The body ends only when the server ends the stream; without the expiry it never does (the
    // read is aborted and the test fails).
    const body = await res.text();
    expect(body.endsWith('event: stream.closed\ndata: {"reason":"token_expired"}\n\n')).toBe(true);
    // The slot (one per user) was freed: a stream with a fresh token opens.
    const ctl = new AbortController();
    const again = await fetch(`${live}/v1/workflows/${workflowId}/events`, {
      headers: { authorization: `Bearer ${await signUserToken(REP, SECRET)}` },
      signal: ctl.signal,
    });
    expect(again.status).toBe(200);
    ctl.abort();
  }, 30_000);

  it('before it opens, a ledger that never answers gets 503 dependency_unavailable within the response deadline', async () => {
    const r = await timedGet(`${stalled}/v1/workflows/${workflowId}/events`, {
      authorization: `Bearer ${await signUserToken(REP, SECRET)}`,
    });
    expect(r.status, 'no answer: the stream request hung').toBe(503);
    expect(r.retryAfter).toBe('5');
    expect(JSON.parse(r.text).error.reason).toBe('dependency_unavailable');
  }, 20_000);
});
