import { connect } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { startEventsApp, type EventsApp } from './support/events-app.ts';

/**
 * Requests of `GET /v1/workflows/:id/events` that never read a stream hold nothing.
 *
 * A client that drops its event-stream request before the stream opens — while the router still
 * reads the workflow from the ledger — holds nothing afterwards: no open-stream slot, no
 * subscription, no poll. Against real Postgres (a table lock holds the read) and real HTTP; the
 * caller is set by a stand-in for the bearer-token middleware. Before the fix the router took a
 * slot and subscribed after the connection had closed, and its `close` listener never fired: each
 * dropped request leaked a slot for good, and past `perUser` of them the user got 429 with no
 * stream open.
 *
 * A `HEAD` request (express routes it to the GET handler) is answered the stream's status and
 * headers and ended (ADR 0720): before the fix it opened a stream whose body HEAD cannot carry, so
 * its connection never finished — the next request a keep-alive client sent on it hung until the
 * token expired — and it held a slot all that time.
 */
let t: TestDatabase;
let app: EventsApp;
let base = '';
let workflowId = '';
let subscribed: EventsApp['subscribed'];
const PER_USER = 2;

beforeAll(async () => {
  t = await createTestDatabase();
  workflowId = (await createAction(t.db, { orderId: 'O-1001' })).workflowId;
  app = await startEventsApp(t.db, t.url, {
    logName: 'stream-dropped-test',
    pollMs: 200,
    limits: { perUser: PER_USER, perTenant: 100 },
    caller: () => ({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['support_rep'] }),
  });
  ({ base, subscribed } = app);
});
afterAll(async () => {
  await app?.close();
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

/** Sends `requests` (raw HTTP/1.1) on one connection, one after the other; resolves with what came back within `ms`. */
async function onOneConnection(requests: string[], ms: number): Promise<string> {
  const { port } = new URL(base);
  const sock = connect(Number(port), '127.0.0.1');
  let got = '';
  sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
  await new Promise((r) => sock.once('connect', r));
  for (const r of requests) {
    sock.write(r);
    await sleep(100);
  }
  await sleep(ms);
  sock.destroy();
  return got;
}

describe('HEAD on the event stream (ADR 0720)', () => {
  const head = () => `HEAD /v1/workflows/${workflowId}/events HTTP/1.1\r\nHost: t\r\n\r\n`;

  it(`answers the stream's status and headers and ends: ${PER_USER + 1} HEADs on one kept-alive connection are each answered; none subscribed or took a slot`, async () => {
    const before = subscribed.mock.calls.length;
    const got = await onOneConnection(
      Array.from({ length: PER_USER + 1 }, () => head()),
      1000,
    );
    expect(got.match(/^HTTP\/1\.1 200 /gm)).toHaveLength(PER_USER + 1);
    expect(got).toContain('content-type: text/event-stream');
    expect(subscribed.mock.calls.length).toBe(before);
    const ctl = new AbortController();
    const res = await fetch(`${base}/v1/workflows/${workflowId}/events`, { signal: ctl.signal });
    expect(res.status).toBe(200);
    ctl.abort();
  });

  it('answers what GET would before the stream: another tenant 404, a bad Last-Event-ID 400', async () => {
    const got = await onOneConnection(
      [
        `HEAD /v1/workflows/${workflowId}/events?lastEventId=x HTTP/1.1\r\nHost: t\r\n\r\n`,
        `HEAD /v1/workflows/00000000-0000-4000-8000-000000000000/events HTTP/1.1\r\nHost: t\r\n\r\n`,
      ],
      500,
    );
    expect(got.match(/^HTTP\/1\.1 \d+/gm)).toEqual(['HTTP/1.1 400', 'HTTP/1.1 404']);
  });
});
