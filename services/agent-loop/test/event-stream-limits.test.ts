import type { Server } from 'node:http';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { closeServer, createLogger, finishApp, listen, revocationCacheOf } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { WorkflowEventHub } from '../src/domain/event-hub.ts';
import { eventsRouter } from '../src/http/events.router.ts';

/**
 * Open-stream limits of `GET /v1/workflows/:id/events` against real Postgres and real HTTP
 * streams (docs/decisions/0250-pushed-workflow-events.md, "Stream limits"). The caller is set by a
 * stand-in for the bearer-token middleware (tested elsewhere); the router, its ledger reads and
 * its streams are the service's own. Remove the limit and the third stream of a user is a 200.
 */
let t: TestDatabase;
let server: Server;
let base = '';
let quill = '';
let north = '';
const open: AbortController[] = [];
let subscribed: MockInstance<WorkflowEventHub['subscribe']>;
const log = createLogger('stream-limits-test');

beforeAll(async () => {
  t = await createTestDatabase();
  quill = (await createAction(t.db, { orderId: 'O-1001' })).workflowId;
  north = (await createAction(t.db, { orderId: 'O-2001', userId: 'rep-ivy', tenant: 'northwind' })).workflowId;
  const app = express();
  app.use((req, _res, next) => {
    const [sub, tenant] = String(req.get('x-test-user')).split('@');
    Object.assign(req, { user: { sub, tenant, roles: ['support_rep'] } });
    next();
  });
  const hub = new WorkflowEventHub(t.url, log); // not started: streams fall back to the ledger poll
  subscribed = vi.spyOn(hub, 'subscribe');
  app.use(
    eventsRouter({
      db: t.db,
      log,
      hub,
      pollMs: 1000,
      heartbeatMs: 15_000,
      limits: { perUser: 2, perTenant: 3 },
      revocations: revocationCacheOf(t.db, 1000),
    }),
  );
  const listening = await listen(finishApp(app, log), 0, '127.0.0.1');
  server = listening.server;
  base = `http://127.0.0.1:${listening.port}`;
});
afterAll(async () => {
  for (const c of open) c.abort();
  if (server) await closeServer(server);
  await t?.drop();
});

/** Opens a stream as `user@tenant` and keeps it open; resolves with the status and, on a refusal, the body. */
async function stream(
  who: string,
  workflowId: string,
): Promise<{ status: number; retryAfter: string | null; reason?: string; close: () => void }> {
  const ctl = new AbortController();
  const res = await fetch(`${base}/v1/workflows/${workflowId}/events`, { headers: { 'x-test-user': who }, signal: ctl.signal });
  if (res.status !== 200) {
    const body = (await res.json()) as { error: { reason: string } };
    return { status: res.status, retryAfter: res.headers.get('retry-after'), reason: body.error.reason, close: () => {} };
  }
  open.push(ctl);
  return { status: 200, retryAfter: null, close: () => ctl.abort() };
}

describe('event stream limits', () => {
  it('refuses a user past their open streams and a tenant past its own, with 429 and a reason; other tenants are untouched; a closed stream frees its slot', async () => {
    const first = await stream('rep-ana@quillfeather', quill);
    expect(first.status).toBe(200);
    expect((await stream('rep-ana@quillfeather', quill)).status).toBe(200);
    expect(await stream('rep-ana@quillfeather', quill)).toMatchObject({ status: 429, retryAfter: '30', reason: 'too_many_streams_user' });

    expect((await stream('rep-ben@quillfeather', quill)).status).toBe(200);
    expect(await stream('rep-ben@quillfeather', quill)).toMatchObject({ status: 429, reason: 'too_many_streams_tenant' });
    expect((await stream('rep-ivy@northwind', north)).status).toBe(200);
    // Deny path: a refused request subscribed to nothing (and so started no poll): 4 admitted, 4 subscriptions.
    expect(subscribed).toHaveBeenCalledTimes(4);

    first.close();
    let again = 0;
    for (const until = Date.now() + 5000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
      const s = await stream('rep-ana@quillfeather', quill);
      again = s.status;
      if (again === 200) break;
    }
    expect(again).toBe(200);
  });

  it("another tenant's workflow is 404 before any limit is counted", async () => {
    expect((await fetch(`${base}/v1/workflows/${north}/events`, { headers: { 'x-test-user': 'rep-ana@quillfeather' } })).status).toBe(404);
  });
});
