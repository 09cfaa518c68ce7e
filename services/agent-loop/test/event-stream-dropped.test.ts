import type { Server } from 'node:http';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { closeServer, createLogger, finishApp, listen, revocationCacheOf } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { WorkflowEventHub } from '../src/domain/event-hub.ts';
import { eventsRouter } from '../src/http/events.router.ts';

/**
 * A client that drops its event-stream request before the stream opens — while the router still
 * reads the workflow from the ledger — holds nothing afterwards: no open-stream slot, no
 * subscription, no poll. Against real Postgres (a table lock holds the read) and real HTTP; the
 * caller is set by a stand-in for the bearer-token middleware. Before the fix the router took a
 * slot and subscribed after the connection had closed, and its `close` listener never fired: each
 * dropped request leaked a slot for good, and past `perUser` of them the user got 429 with no
 * stream open.
 */
let t: TestDatabase;
let server: Server;
let base = '';
let workflowId = '';
let subscribed: MockInstance<WorkflowEventHub['subscribe']>;
const log = createLogger('stream-dropped-test');
const PER_USER = 2;

beforeAll(async () => {
  t = await createTestDatabase();
  workflowId = (await createAction(t.db, { orderId: 'O-1001' })).workflowId;
  const app = express();
  app.use((req, _res, next) => {
    Object.assign(req, { user: { sub: 'rep-ana', tenant: 'quillfeather', roles: ['support_rep'] } });
    next();
  });
  const hub = new WorkflowEventHub(t.url, log); // not started: streams fall back to the ledger poll
  subscribed = vi.spyOn(hub, 'subscribe');
  app.use(
    eventsRouter({
      db: t.db,
      log,
      hub,
      pollMs: 200,
      heartbeatMs: 15_000,
      limits: { perUser: PER_USER, perTenant: 100 },
      revocations: revocationCacheOf(t.db, 1000),
    }),
  );
  const listening = await listen(finishApp(app, log), 0, '127.0.0.1');
  server = listening.server;
  base = `http://127.0.0.1:${listening.port}`;
});
afterAll(async () => {
  if (server) await closeServer(server);
  await t?.drop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Sends an event-stream request while another transaction holds the workflows table, drops it
 * once the router waits on its read, then lets the read go and waits until the router has moved on.
 */
async function dropWhileReading(): Promise<void> {
  const locker = new pg.Client({ connectionString: t.url });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE workflows IN ACCESS EXCLUSIVE MODE');
    const ctl = new AbortController();
    const sent = fetch(`${base}/v1/workflows/${workflowId}/events`, { signal: ctl.signal }).catch(() => null);
    // Barrier: the router's read is waiting on the lock.
    for (let waiting = 0; waiting === 0; await sleep(20)) {
      const r = await locker.query<{ n: number }>(
        `select count(*)::int as n from pg_locks where relation = 'workflows'::regclass and not granted`,
      );
      waiting = r.rows[0]!.n;
    }
    ctl.abort();
    await sent;
    await sleep(100); // the server has seen the connection close
    await locker.query('COMMIT');
  } finally {
    await locker.end();
  }
  await sleep(300); // the router's read returns and it decides what to do
}

describe('an event-stream request dropped before its stream opens', () => {
  it(`${PER_USER + 2} dropped requests leave the user every slot; none subscribed`, async () => {
    for (let i = 0; i < PER_USER + 2; i++) await dropWhileReading();
    expect(subscribed).toHaveBeenCalledTimes(0);
    const ctl = new AbortController();
    const res = await fetch(`${base}/v1/workflows/${workflowId}/events`, { signal: ctl.signal });
    expect(res.status).toBe(200);
    expect(subscribed).toHaveBeenCalledTimes(1);
    ctl.abort();
  });
});
