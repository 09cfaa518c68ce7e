import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startPrivateRedis, type PrivateRedis } from '@gatehouse/test-harness';
import { redisReadyCheck } from '../src/service-context.ts';
import { within } from '../src/timeout.ts';

// /readyz's Redis check against a Redis that stops answering but keeps its socket (SIGSTOP):
// probes fail, and they share one PING instead of queueing one each.

let server: PrivateRedis;
beforeAll(async () => {
  server = await startPrivateRedis();
});
afterAll(async () => {
  await server?.stop();
});

/** How many PINGs the server has executed since its stats were reset (INFO commandstats). */
async function pings(admin: Redis): Promise<number> {
  const m = /cmdstat_ping:calls=(\d+)/.exec(await admin.info('commandstats'));
  return Number(m?.[1] ?? 0);
}

describe('redisReadyCheck', () => {
  it('passes while Redis answers; on a frozen Redis every probe fails, and ten probes send one PING', async () => {
    const redis = new Redis(server.url, { maxRetriesPerRequest: null });
    const admin = new Redis(server.url);
    try {
      const check = redisReadyCheck(redis);
      await redis.ping(); // connected
      await check();
      await admin.config('RESETSTAT');
      server.freeze();
      const probes = await Promise.all(
        Array.from({ length: 10 }, () =>
          within(check(), 200).then(
            () => 'ready',
            (err: Error) => err.message,
          ),
        ),
      );
      expect(probes.every((p) => p.startsWith('timed out'))).toBe(true);
      for (let i = 0; i < 5; i++) await within(check(), 50).catch(() => undefined);
      server.thaw();
      await check();
      expect(await pings(admin)).toBe(1);
    } finally {
      server.thaw();
      redis.disconnect();
      admin.disconnect();
    }
  });

  it('fails at once while the connection is not ready, without queueing a command', async () => {
    const redis = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: null, lazyConnect: true });
    await expect(redisReadyCheck(redis)()).rejects.toThrow('redis connection is wait');
    redis.disconnect();
  });
});
