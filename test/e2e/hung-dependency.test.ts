import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startE2EStack, startPrivateRedis, type E2EStack, type PrivateRedis } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { Redis } from 'ioredis';

// A Redis that hangs (SIGSTOP: connections stay open, nothing answers) is not one that is down:
// nothing fails fast. Intake must still answer — 503 dependency_unavailable with Retry-After,
// after HTTP_RESPONSE_DEADLINE_MS — and the requests it could not serve must not use up the
// rep's rate limit, nor run late after the caller was told to retry.

const SECRET = 'local-auth-secret-change-me';
let redis: PrivateRedis;
let s: E2EStack;

beforeAll(async () => {
  redis = await startPrivateRedis();
  s = await startE2EStack({ REDIS_URL: redis.url, HTTP_RESPONSE_DEADLINE_MS: '1500', INTAKE_RATE_PER_USER: '3' });
});
afterAll(async () => {
  redis?.thaw();
  await s?.close();
  await redis?.stop();
});

/** POST /v1/tickets as rep-ana; `{status: 0}` when no answer came within `waitMs`. */
async function submit(ticketId: string, waitMs = 20_000): Promise<{ status: number; body: Record<string, unknown> }> {
  const token = await tokenFor('rep-ana', SECRET);
  try {
    const r = await fetch(`${s.url('agent-loop')}/v1/tickets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ticketId, text: 'What is the status of order O-1001?', mode: 'investigate' }),
      signal: AbortSignal.timeout(waitMs),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  } catch {
    return { status: 0, body: {} };
  }
}

/**
 * Waits until every intake counter (the rep's and the tenant's) in the private Redis is at most
 * `points`. The refused requests' takes and give-backs run once the server thaws. The last of
 * them is refused by the user's limit, since the others have not given their points back yet,
 * and the store counts a refused take too.
 * @throws Error after 30 s, naming the counters.
 */
async function pointsBackTo(points: number): Promise<void> {
  const rc = new Redis(redis.url);
  try {
    for (const until = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 100))) {
      const keys = await rc.keys('*:rl:intake:*');
      const values = keys.length ? (await rc.mget(keys)).map(Number) : [];
      // Both counters (the rep's and the tenant's) back to exactly `points`: none left counted, none given back twice.
      if (values.length === 2 && values.every((v) => v === points)) return;
      if (Date.now() > until) throw new Error(`refused requests never gave their points back: ${JSON.stringify(values)}`);
    }
  } finally {
    rc.disconnect();
  }
}

const workflowsOf = async (ticketId: string) =>
  (await s.db.db.selectFrom('workflows').select('id').where('ticket_id', '=', ticketId).execute()).length;

describe('intake with a Redis that hangs', () => {
  it('answers 503 dependency_unavailable instead of hanging; the failed requests neither count nor run late', async () => {
    expect((await submit('H-before')).status).toBe(202); // 1 of the rep's 3
    redis.freeze();
    try {
      for (let i = 0; i < 3; i++) {
        const r = await submit('H-1');
        expect(r.status).toBe(503);
        expect((r.body.error as { reason: string }).reason).toBe('dependency_unavailable');
      }
    } finally {
      redis.thaw();
    }
    // The counters answer again: the three refused requests give their points back and none runs.
    await pointsBackTo(1);
    expect(await workflowsOf('H-1')).toBe(0);
    const retried = await submit('H-1');
    expect(retried.status, JSON.stringify(retried.body)).toBe(202); // 2 of 3, not 429
    expect(await workflowsOf('H-1')).toBe(1);
  }, 120_000);

  it('control removed (a deadline longer than the wait): the request hangs', async () => {
    await s.stack.restart('agent-loop', { HTTP_RESPONSE_DEADLINE_MS: '600000' });
    redis.freeze();
    try {
      expect((await submit('H-2', 5000)).status).toBe(0);
    } finally {
      redis.thaw();
      await s.stack.restart('agent-loop', { HTTP_RESPONSE_DEADLINE_MS: '1500' });
    }
  }, 120_000);
});
