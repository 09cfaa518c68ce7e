import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type RunningStack } from '@gatehouse/cli';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, freePort, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// ADR 0400: two audit processes over one ledger raise each alert once per monitor interval
// between them, not once per replica. A refund above the auto limit ran without an approval, so
// every pass alerts; the alert webhook counts the passes. With the claim removed
// (GATEHOUSE_TEST_EVERY_REPLICA_MONITORS) both replicas post every interval.

const INTERVAL_MS = 1000;
const WINDOW_MS = 8000;
let t: TestDatabase;
let receiver: Server;
let posts: number[] = [];
let webhook = '';

beforeAll(async () => {
  t = await createTestDatabase();
  const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 12_000 });
  await recordEffect(t.db, a, { approvalUsed: false });
  receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      posts.push(Date.now());
      res.end('ok');
    });
  });
  const port = await freePort();
  await new Promise<void>((r) => receiver.listen(port, '127.0.0.1', r));
  webhook = `http://127.0.0.1:${port}/alerts`;
}, 60_000);

afterAll(async () => {
  await new Promise((r) => receiver?.close(r));
  await t?.drop();
});

/** Two audit processes on one ledger for {@link WINDOW_MS}; returns the alert posts of that window. */
async function twoReplicas(extra: Record<string, string>): Promise<number> {
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-monitor-replicas-'));
  const base = {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: testQueuePrefix(),
    GATEHOUSE_ENV: 'test',
    LOG_LEVEL: 'warn',
    AUDIT_SIGNING_KEY_PATH: resolve(dir, 'audit-key.pem'),
    MONITOR_INTERVAL_MS: String(INTERVAL_MS),
    ALERT_WEBHOOK_URL: webhook,
    ...extra,
  };
  const stacks: RunningStack[] = [];
  try {
    for (const name of ['a', 'b'])
      stacks.push(
        await startStack({
          env: { ...process.env, ...base, AUDIT_PORT: String(await freePort()) },
          dir: resolve(dir, name),
          only: ['audit'],
          readyTimeoutMs: 120_000,
        }),
      );
    posts = [];
    const from = Date.now();
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    return posts.filter((at) => at >= from && at < from + WINDOW_MS).length;
  } finally {
    for (const s of stacks) await s.stop();
  }
}

describe('invariant monitors with two audit replicas', () => {
  it('one alert per interval between them; with the claim removed, one per replica', { timeout: 360_000 }, async () => {
    const claimed = await twoReplicas({});
    // One pass per interval (at least 0.9 × apart): at most ⌊8 / 0.9⌋ + 1 = 9 claims in 8 s, 10 posts if one pass answers late; each replica
    // on its own would post about 16.
    expect(claimed).toBeGreaterThanOrEqual(4);
    expect(claimed).toBeLessThanOrEqual(10);
    const unclaimed = await twoReplicas({ GATEHOUSE_TEST_EVERY_REPLICA_MONITORS: '1' });
    expect(unclaimed).toBeGreaterThanOrEqual(12);
    console.log(`alert posts in ${WINDOW_MS / 1000} s: ${claimed} claimed, ${unclaimed} with the claim removed`);
  });
});
