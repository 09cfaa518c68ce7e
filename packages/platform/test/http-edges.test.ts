import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawExchange } from '@gatehouse/test-harness';
import { createHttpApp, finishApp } from '../src/http.ts';
import { closeServer, listen, readCheckIntervalMs } from '../src/http-server.ts';
import { createLogger } from '../src/logger.ts';

// The edges of every HTTP service's server (docs/decisions/0690): a head too large is answered
// 431 with the JSON error every 4xx has, and a request not read whole within the read bound —
// a client that stalls or trickles its body, or its head — is answered 408 with a reason and its
// socket freed, while other requests are served as usual. Raw sockets: Node's client sends neither.

const READ_MS = 1000;
/** Latest a refusal may come after the bound: one check interval, plus slack for a loaded machine. */
const LATEST_MS = READ_MS + readCheckIntervalMs(READ_MS) + 2500;

let server: Server;
let port: number;
beforeAll(async () => {
  const log = createLogger('http-edges-test');
  log.level = 'warn';
  const app = createHttpApp('http-edges-test');
  app.post('/echo', (req, res) => void res.json({ got: req.body as unknown }));
  app.get('/slow', async (_req, res) => {
    await sleep(READ_MS * 2);
    res.json({ slow: true });
  });
  finishApp(app, log);
  ({ server, port } = await listen(app, 0, '127.0.0.1', { requestReadTimeoutMs: READ_MS }));
});
afterAll(async () => {
  server.closeAllConnections();
  await closeServer(server);
});

const bigHead = (method: string) => `${method} /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`;
const stalledPost = (sent: string, length = 200) =>
  `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n${sent}`;

describe('a head too large', () => {
  it('is answered 431 with a JSON reason, and the connection closed', async () => {
    const r = await rawExchange(port, [bigHead('GET')]);
    expect(r.status).toBe(431);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body)).toMatchObject({ error: { reason: 'headers_too_large', message: expect.stringContaining('16 KiB') } });
    expect(r.closedByServer).toBe(true);
  });

  it('of a HEAD request: the status line alone (a HEAD answer has no body)', async () => {
    const r = await rawExchange(port, [bigHead('HEAD')]);
    expect(r.status).toBe(431);
    expect(r.headers['content-length']).toBe('0');
    expect(r.body).toBe('');
  });
});

describe('a request not read whole within the read bound', () => {
  it('a body that stalls: 408 request_timeout within the bound, the socket freed', async () => {
    const r = await rawExchange(port, [stalledPost('{"a":')], { waitMs: 30_000 });
    expect(r.status).toBe(408);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body)).toMatchObject({
      error: { reason: 'request_timeout', message: expect.stringContaining('HTTP_REQUEST_READ_TIMEOUT_MS') },
    });
    expect(r.answeredAfterMs).toBeGreaterThanOrEqual(READ_MS - 50);
    expect(r.answeredAfterMs).toBeLessThan(LATEST_MS);
    expect(r.closedByServer).toBe(true);
  });

  it('a body that trickles (a byte every 100 ms, never finishing in time): 408 within the bound', async () => {
    const trickle = Array.from({ length: 100 }, () => ' ');
    const r = await rawExchange(port, [stalledPost(''), ...trickle], { gapMs: 100, waitMs: 30_000 });
    expect(r.status).toBe(408);
    expect(JSON.parse(r.body).error.reason).toBe('request_timeout');
    expect(r.answeredAfterMs).toBeLessThan(LATEST_MS);
    expect(r.closedByServer).toBe(true);
  });

  it('a head that stalls: 408 request_timeout within the bound', async () => {
    const r = await rawExchange(port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n'], { waitMs: 30_000 });
    expect(r.status).toBe(408);
    expect(JSON.parse(r.body).error.reason).toBe('request_timeout');
    expect(r.answeredAfterMs).toBeLessThan(LATEST_MS);
    expect(r.closedByServer).toBe(true);
  });

  it('a HEAD request whose body stalls: 408 without a body', async () => {
    const r = await rawExchange(
      port,
      ['HEAD /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{"a"'],
      { waitMs: 30_000 },
    );
    expect(r.status).toBe(408);
    expect(r.body).toBe('');
    expect(r.closedByServer).toBe(true);
  });

  it('meanwhile other requests are served, before the stalled ones are refused', async () => {
    const openedAt = Date.now();
    const stalled = Array.from({ length: 8 }, () => rawExchange(port, [stalledPost('{"a":')], { waitMs: 30_000 }));
    await sleep(100);
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/echo`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ i }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ got: { i } });
    }
    const servedAt = Date.now();
    const refused = await Promise.all(stalled);
    for (const r of refused) expect([r.status, r.closedByServer]).toEqual([408, true]);
    // Every normal request was answered while the stalled ones still held their sockets.
    expect(servedAt).toBeLessThan(openedAt + Math.min(...refused.map((r) => r.answeredAfterMs)));
  });

  it('a handler slower than the bound, once its request is read, is not cut', async () => {
    const res = await fetch(`http://127.0.0.1:${port}/slow`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ slow: true });
  });

  it('a request sent whole is answered as usual', async () => {
    const body = '{"ok":1}';
    const r = await rawExchange(port, [stalledPost(body, body.length)], { waitMs: 500 });
    expect(r.status).toBe(200);
    expect(r.body).toContain('{"got":{"ok":1}}');
  });
});

// Two refusals Node writes itself, before the app, with an empty body unless the server answers
// them: an HTTP/1.1 request without Host (RFC 9112 §3.2) and an Expect other than 100-continue.
// Each is a 4xx with the JSON reason every other 4xx has (ADR 0690).
describe('requests Node refuses before the app', () => {
  it('an HTTP/1.1 request without Host: 400 missing_host with a reason, and the connection closed', async () => {
    const r = await rawExchange(port, ['GET /healthz HTTP/1.1\r\n\r\n'], { waitMs: 5000 });
    expect(r.status).toBe(400);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body)).toMatchObject({ error: { reason: 'missing_host', message: expect.stringContaining('Host') } });
    expect(r.closedByServer).toBe(true);
  });

  it('an HTTP/1.0 request without Host is served (Host is required from HTTP/1.1 on)', async () => {
    const r = await rawExchange(port, ['POST /echo HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'], {
      waitMs: 5000,
    });
    expect(r.status).toBe(200);
    expect(r.body).toContain('{"got":{}}');
  });

  it('an Expect other than 100-continue: 417 expectation_failed with a reason; the handler never runs', async () => {
    const body = '{"a":1}';
    const r = await rawExchange(
      port,
      [
        `POST /echo HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ],
      { waitMs: 5000 },
    );
    expect(r.status).toBe(417);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body)).toMatchObject({ error: { reason: 'expectation_failed', message: expect.stringContaining('100-continue') } });
    expect(r.body).not.toContain('got');
    expect(r.closedByServer).toBe(true);
  });
});
