import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { startEventsApp, type EventsApp } from './support/events-app.ts';

/**
 * Open-stream limits of `GET /v1/workflows/:id/events` against real Postgres and real HTTP
 * streams (docs/decisions/0250-pushed-workflow-events.md, "Stream limits"). The caller is set by a
 * stand-in for the bearer-token middleware (tested elsewhere); the router, its ledger reads and
 * its streams are the service's own. Remove the limit and the third stream of a user is a 200.
 */
let t: TestDatabase;
let app: EventsApp;
let base = '';
let quill = '';
let north = '';
const open: AbortController[] = [];
let subscribed: EventsApp['subscribed'];

beforeAll(async () => {
  t = await createTestDatabase();
  quill = (await createAction(t.db, { orderId: 'O-1001' })).workflowId;
  north = (await createAction(t.db, { orderId: 'O-2001', userId: 'rep-ivy', tenant: 'northwind' })).workflowId;
  app = await startEventsApp(t.db, t.url, {
    logName: 'stream-limits-test',
    pollMs: 1000,
    limits: { perUser: 2, perTenant: 3 },
    caller: (req) => {
      const [sub = '', tenant = ''] = String(req.get('x-test-user')).split('@');
      return { sub, tenant, roles: ['support_rep'] };
    },
  });
  ({ base, subscribed } = app);
});
afterAll(async () => {
  for (const c of open) c.abort();
  await app?.close();
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
