import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Redis } from 'ioredis';
import { queueName } from '@gatehouse/contracts';
import type { StackEvent } from '@gatehouse/cli';
import {
  startE2EStack,
  startPrivatePostgres,
  startPrivateRedis,
  type E2EStack,
  type PrivatePostgres,
  type PrivateRedis,
} from '@gatehouse/test-harness';

// A service (re)started while Postgres or Redis is down waits for it instead of exiting: no
// crash loop under the supervisor (or an orchestrator), and ready as soon as the dependency is
// back. Every service listens with Redis down and says so on /readyz.

let pg: PrivatePostgres;
let redis: PrivateRedis;
let s: E2EStack;
const events: StackEvent[] = [];
/** The line bootStep writes when the release check starts waiting for the database. */
const WAITS_AT_SCHEMA_CHECK = /"step":"check the database schema".*"msg":"boot step waits for a dependency"/;

beforeAll(async () => {
  [pg, redis] = await Promise.all([startPrivatePostgres(), startPrivateRedis()]);
  s = await startE2EStack(
    { REDIS_URL: redis.url },
    {
      pgServer: pg.url,
      supervise: true,
      restartPolicy: { initialMs: 100, maxMs: 400, crashLoopAfter: 3 },
      onEvent: (e) => events.push(e),
    },
  );
}, 300_000);
afterAll(async () => {
  await s?.stack.stop();
  await s?.db.db.destroy().catch(() => undefined);
  await Promise.all([pg?.destroy(), redis?.stop()]);
});

const get = (url: string) =>
  fetch(url, { signal: AbortSignal.timeout(3000) }).then(
    async (r) => ({ status: r.status, body: (await r.json()) as { failing?: Record<string, string> } }),
    () => null,
  );

describe('services started during an outage', () => {
  it(
    'Postgres down: every service restarted meanwhile waits at its schema check (no exit, no crash loop), and is ready once it is back',
    { timeout: 240_000 },
    async () => {
      const names = ['executor', 'agent-loop', 'approval', 'policy-gateway', 'audit', 'ops'];
      const logOf = (name: string) => readFileSync(resolve(s.dir, `${name}.log`), 'utf8');
      await pg.stop();
      try {
        for (const name of names) await s.stack.kill(name, 'SIGKILL');
        // Each new process reaches the release check (ADR 0220) and waits there for Postgres,
        // instead of skipping the schema check or exiting (a slow start on a loaded machine is fine).
        await vi.waitFor(
          () => {
            for (const name of names) expect(logOf(name), name).toMatch(WAITS_AT_SCHEMA_CHECK);
          },
          { timeout: 120_000, interval: 250 },
        );
        await sleep(2000); // twenty times the supervisor's first back-off: a process that exits is restarted meanwhile
        for (const name of names) expect(s.stack.restarts(name), `${name} restarted more than once`).toBe(1);
        expect(events.filter((e) => e.type === 'crash-loop')).toEqual([]);
      } finally {
        await pg.start();
      }
      await Promise.all(names.map((name) => s.stack.ready(name, 60_000)));
      for (const name of names) {
        expect(s.stack.restarts(name)).toBe(1);
        expect(logOf(name), name).not.toContain('could not check the database schema at boot');
      }
    },
  );

  it('Redis down: every service restarted meanwhile listens, and /readyz names Redis until it is back', { timeout: 240_000 }, async () => {
    const names = ['executor', 'agent-loop', 'approval', 'policy-gateway', 'audit', 'ops'];
    await redis.kill();
    try {
      for (const name of names) await s.stack.kill(name, 'SIGKILL');
      for (const name of names) {
        const url = s.url(name);
        let ready: Awaited<ReturnType<typeof get>> = null;
        for (const until = Date.now() + 60_000; !ready && Date.now() < until;) {
          ready = await get(`${url}/readyz`);
          if (!ready) await sleep(250);
        }
        expect(ready, `${name} never listened with Redis down`).not.toBeNull();
        expect(ready!.status, name).toBe(503);
        expect(Object.keys(ready!.body.failing ?? {}), name).toContain('redis');
        expect((await get(`${url}/healthz`))?.status, name).toBe(200);
      }
    } finally {
      await redis.restartEmpty();
    }
    await Promise.all(names.map((name) => s.stack.ready(name, 60_000)));
  });

  it(
    'a reconcile schedule Redis refuses (not a wait) ends the executor with exit 1, said in its log; fixed, it starts',
    { timeout: 240_000 },
    async () => {
      // A key of the wrong type where BullMQ keeps the queue's job schedulers: Redis answers WRONGTYPE.
      const schedulers = `${s.prefix}:${queueName('reconcile', 'rel-1')}:repeat`;
      const r = new Redis(redis.url, { maxRetriesPerRequest: 3 });
      try {
        await r.set(schedulers, 'not a sorted set');
        const before = events.length;
        await s.stack.kill('executor', 'SIGKILL');
        await vi.waitFor(
          () => expect(events.slice(before).some((e) => e.type === 'exited' && e.service === 'executor' && e.code === 1)).toBe(true),
          { timeout: 120_000, interval: 250 },
        );
        expect(readFileSync(resolve(s.dir, 'executor.log'), 'utf8')).toMatch(/WRONGTYPE.*could not set the reconcile schedule; stopping/);
        await r.del(schedulers);
      } finally {
        r.disconnect();
      }
      await s.stack.ready('executor', 120_000);
    },
  );
});
