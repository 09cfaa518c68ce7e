import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
    'Postgres down: agent-loop and ops restarted meanwhile wait (no exit, no crash loop), and are ready once it is back',
    { timeout: 240_000 },
    async () => {
      await pg.stop();
      try {
        for (const name of ['agent-loop', 'ops']) await s.stack.kill(name, 'SIGKILL');
        // Forty times the supervisor's first backoff: a process that exits on the outage restarts again and again.
        await sleep(4000);
        for (const name of ['agent-loop', 'ops']) expect(s.stack.restarts(name), `${name} restarted more than once`).toBe(1);
        expect(events.filter((e) => e.type === 'crash-loop')).toEqual([]);
      } finally {
        await pg.start();
      }
      await Promise.all(['agent-loop', 'ops'].map((name) => s.stack.ready(name, 60_000)));
      for (const name of ['agent-loop', 'ops']) expect(s.stack.restarts(name)).toBe(1);
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
});
