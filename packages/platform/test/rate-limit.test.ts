import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import request from 'supertest';
import { Redis } from 'ioredis';
import { dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL } from '@gatehouse/test-harness';
import { AbuseLimiter, rateLimit } from '../src/index.ts';

// The abuse limits count requests the server served, not the ones it failed: after an outage
// (every request answered 503), the reps who retried are not locked out (real Redis counters).

let redis: Redis;
const prefix = testQueuePrefix();

beforeAll(() => {
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
});
afterAll(async () => {
  redis?.disconnect();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
});

/** An app whose one route answers `status()` behind a limit of 3 per user per hour. */
function app(surface: string, status: () => number) {
  const limiter = new AbuseLimiter(redis, prefix, { surface, perUser: 3, perTenant: 100, windowSeconds: 3600 });
  const a = express();
  a.post(
    '/x',
    rateLimit(limiter, () => ({ user: 'rep-ana', tenant: 'quillfeather' })),
    (_req, res) => void res.status(status()).json({}),
  );
  return a;
}

describe('rate limits and failed requests', () => {
  it('requests answered 5xx give their point back: after five 503s the user still has all three', async () => {
    let answer = 503;
    const a = app('failed', () => answer);
    for (let i = 0; i < 5; i++) expect((await request(a).post('/x')).status).toBe(503);
    answer = 202;
    for (let i = 0; i < 3; i++) expect((await request(a).post('/x')).status).toBe(202);
    expect((await request(a).post('/x')).status).toBe(429);
  });

  it('4xx answers still count (a client error is the client’s request)', async () => {
    const a = app('client-error', () => 400);
    for (let i = 0; i < 3; i++) expect((await request(a).post('/x')).status).toBe(400);
    expect((await request(a).post('/x')).status).toBe(429);
  });

  it('a take refused by the user limit is given back for the user alone (the tenant was never counted)', async () => {
    const limiter = new AbuseLimiter(redis, prefix, { surface: 'late', perUser: 1, perTenant: 100, windowSeconds: 3600 });
    const subject = { user: 'rep-ana', tenant: 'quillfeather' };
    const counters = async () =>
      (await redis.mget(`${prefix}:rl:late:user:quillfeather\u0000rep-ana`, `${prefix}:rl:late:tenant:quillfeather`)).map(Number);
    expect(await limiter.take(subject)).toBeNull();
    const refusal = await limiter.take(subject);
    expect(refusal?.scope).toBe('user');
    expect(await counters()).toEqual([2, 1]); // the store counts the refused take too
    await limiter.giveBack(subject, refusal?.scope);
    expect(await counters()).toEqual([1, 1]);
    await limiter.giveBack(subject);
    expect(await counters()).toEqual([0, 0]);
  });
});
