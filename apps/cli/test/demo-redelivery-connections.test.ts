import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startPrivateRedis, type PrivateRedis } from '@gatehouse/test-harness';
import { addAndAwaitJob } from '../src/demo.ts';

// The demo redelivers the refund's execution job and waits for the executor's answer on two Redis
// connections of its own. When that wait threw (a failed job, a timeout), the connections were
// left open: a demo that failed leaked them for the life of the process.

let redis: PrivateRedis;
let admin: Redis;

beforeAll(async () => {
  redis = await startPrivateRedis();
  admin = new Redis(redis.url, { maxRetriesPerRequest: null });
});

afterAll(async () => {
  admin?.disconnect();
  await redis?.stop();
});

/** How many clients the server holds (this test's admin connection included). */
const clients = async (): Promise<number> => ((await admin.client('LIST')) as string).trim().split('\n').length;

/** Waits (5 s at most: the server drops a closed socket shortly after) until the server holds `n` clients; returns the count last seen. */
async function settlesTo(n: number): Promise<number> {
  const until = Date.now() + 5_000;
  let now = await clients();
  while (now !== n && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 50));
    now = await clients();
  }
  return now;
}

describe("the demo's redelivery", () => {
  it('closes its queue and queue-events connections when no worker answers in time', async () => {
    const baseline = await clients();
    const queue = { redisUrl: redis.url, queuePrefix: 'demo-redelivery-test', name: 'executions' };
    // No worker consumes the queue: the wait for the job's answer times out and throws.
    await expect(addAndAwaitJob(queue, { name: 'execute', data: { n: 1 }, jobId: 'job-1' }, 300)).rejects.toThrow();
    expect(await settlesTo(baseline)).toBe(baseline);
  });
});
