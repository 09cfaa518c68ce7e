import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type RunningStack } from '@gatehouse/cli';
import {
  createTestDatabase,
  dropQueuePrefix,
  freePort,
  rawExchange,
  testQueuePrefix,
  TEST_REDIS_URL,
  type TestDatabase,
} from '@gatehouse/test-harness';

// The HTTP edges of a real service process (the intake, agent-loop's main.ts over the shared
// server setup; docs/decisions/0690): an oversized head gets the JSON 431 every 4xx has, a body
// that stalls or trickles gets 408 request_timeout within HTTP_REQUEST_READ_TIMEOUT_MS and its
// socket is closed, and normal requests are served meanwhile.

const READ_MS = 1500;
/** The bound, one check interval (300 ms), and slack for a loaded two-core machine. */
const LATEST_MS = READ_MS + 300 + 3000;

let t: TestDatabase;
let prefix: string;
let stack: RunningStack;
let dir: string;
let port: number;
beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  dir = mkdtempSync(resolve(tmpdir(), 'gh-http-edges-'));
  port = await freePort();
  const env: Record<string, string> = {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    GATEHOUSE_ENV: 'test',
    LOG_LEVEL: 'warn',
    AGENT_LOOP_PORT: String(port),
    HTTP_REQUEST_READ_TIMEOUT_MS: String(READ_MS),
  };
  stack = await startStack({ env, dir, only: ['agent-loop'], readyTimeoutMs: 150_000 });
});
afterAll(async () => {
  await stack?.stop();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

const ticketHead = (length: number) =>
  `POST /v1/tickets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

describe('the intake as a process', () => {
  it('a head over 16 KiB: 431 with a JSON reason', async () => {
    const r = await rawExchange(port, [`GET /v1/workflows/x HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`]);
    expect(r.status).toBe(431);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body).error.reason).toBe('headers_too_large');
  });

  it('bodies that stall or trickle: 408 request_timeout within the bound, sockets closed; normal requests served meanwhile', async () => {
    const openedAt = Date.now();
    const stalled = Array.from({ length: 4 }, () => rawExchange(port, [ticketHead(300), '{"ticketId":'], { waitMs: 30_000 }));
    const trickled = Array.from({ length: 4 }, () =>
      rawExchange(port, [ticketHead(300), ...Array.from({ length: 200 }, () => ' ')], { gapMs: 100, waitMs: 30_000 }),
    );
    await sleep(200);
    for (let i = 0; i < 3; i++) {
      for (const path of ['/healthz', '/openapi.json']) {
        const res = await fetch(`http://127.0.0.1:${port}${path}`);
        expect(res.status, path).toBe(200);
        await res.arrayBuffer();
      }
      // A whole ticket without a token: read, then refused (401), at once.
      const res = await fetch(`http://127.0.0.1:${port}/v1/tickets`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ticketId: `T-${i}`, text: 'hello' }),
      });
      expect(res.status).toBe(401);
    }
    const servedAt = Date.now();
    const refused = await Promise.all([...stalled, ...trickled]);
    // Every normal request was answered while the slow ones still held their sockets.
    expect(servedAt).toBeLessThan(openedAt + Math.min(...refused.map((r) => r.answeredAfterMs)));
    for (const r of refused) {
      expect(r.status).toBe(408);
      expect(JSON.parse(r.body).error.reason).toBe('request_timeout');
      expect(r.answeredAfterMs).toBeGreaterThanOrEqual(READ_MS - 50);
      expect(r.answeredAfterMs).toBeLessThan(LATEST_MS);
      expect(r.closedByServer).toBe(true);
    }
  });

  it('is still running and logged no error', async () => {
    expect(stack.processes.get('agent-loop')?.exitCode).toBeNull();
    const lines = readFileSync(resolve(dir, 'agent-loop.log'), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(lines.filter((l) => l.level >= 50 || /unhandled/i.test(l.msg))).toEqual([]);
  });
});
