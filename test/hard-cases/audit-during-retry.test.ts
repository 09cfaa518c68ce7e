import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  auditHeartbeatOlderThan,
  fault,
  fc,
  fixtures,
  msg,
  refunds,
  sleep,
  stagingRequests,
  startHuntStack,
  submit,
  summary,
  view,
  waitFor,
  waitUntil,
  type HuntStack,
} from './helpers.ts';

/**
 * Audit storage that becomes unavailable while an idempotent write waits out a 429's Retry-After
 * (docs/decisions/0706-a-retry-waits-for-audit.md): the first attempt wrote nothing, so the retry
 * is a new consequential effect, and it is held like a step at the audit gate until audit is back.
 */

const paymentPosts = async (s: HuntStack, orderId: string) =>
  (await stagingRequests(s, `?orderId=${orderId}&target=payments`)).filter((r) => r.method === 'POST');

/** The Retry-After of the 429, ms: long enough to stop the audit service inside it on a loaded machine. */
const RETRY_AFTER_MS = 20_000;
/**
 * The executor's deadline and lease, so that the 20 s wait is waited for (default 15 s, 30 s), and
 * the audit gate's thresholds of the existing audit-unavailable tests (a stopped audit service
 * fails the gate within 1.5 s).
 */
const ENV = {
  EXECUTION_DEADLINE_MS: '40000',
  LEASE_MS: '60000',
  AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500',
  AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3000',
};

/**
 * Submits an auto-allowed refund whose first payments attempt is refused 429 with a 20 s
 * Retry-After, stops the audit service inside that wait (its heartbeat then fails the gate), and
 * waits past the Retry-After. Returns what the payments ledger saw meanwhile.
 */
async function auditDownDuringRetryWait(
  s: HuntStack,
  c: { ticketId: string; orderId: string; amount: string },
): Promise<{ token: string; workflowId: string; posts: number; refunds: number }> {
  await fault(s, { target: 'payments', mode: 'rate_limit', times: 1, retryAfterMs: RETRY_AFTER_MS });
  await fixtures(s, c.ticketId, [fc(['issue_refund', { orderId: c.orderId, amount: c.amount, reason: 'late' }]), msg()]);
  const { token, workflowId } = await submit(s, 'rep-ana', c.ticketId, `refund ${c.amount} on ${c.orderId}`);
  await waitUntil(async () => (await paymentPosts(s, c.orderId)).some((r) => r.status === 429), 'the first attempt rate-limited');
  const limitedAt = new Date(String((await paymentPosts(s, c.orderId))[0]!.at)).getTime();
  await s.stack.kill('audit', 'SIGKILL', { keepDown: true }); // no supervised restart until restart('audit')
  await waitUntil(() => auditHeartbeatOlderThan(s.db.db, 2), 'the audit heartbeat older than the gate');
  // The audit gate must fail inside the wait, before the retry would be sent.
  expect(Date.now() - limitedAt, 'audit unavailable inside the Retry-After wait').toBeLessThan(RETRY_AFTER_MS - 1000);
  // Past the Retry-After: whatever the executor does with the wait has happened.
  await sleep(Math.max(0, limitedAt + RETRY_AFTER_MS + 4000 - Date.now()));
  return { token, workflowId, posts: (await paymentPosts(s, c.orderId)).length, refunds: (await refunds(s, c.orderId)).length };
}

describe('hunt: audit unavailable while a 429 retry waits', () => {
  let s: HuntStack;
  beforeAll(async () => {
    s = await startHuntStack(ENV);
  });
  afterAll(async () => {
    await s?.close();
  });

  it(
    'the retry is not sent while audit is down, the step waits on audit; back up, it pays once under the same key',
    // An audit restart (up to 150 s to be ready on a loaded machine) after a 20 s wait.
    { timeout: 240_000 },
    async () => {
      const c = { ticketId: 'A-429-audit', orderId: 'O-1007', amount: '20.00' };
      let seen: Awaited<ReturnType<typeof auditDownDuringRetryWait>>;
      try {
        seen = await auditDownDuringRetryWait(s, c);
        // Held as at the audit gate: the run says it waits on audit; nothing more was sent.
        const held = await waitFor(s, seen.token, seen.workflowId, (x) => String(x.nextStep ?? '').includes('audit'));
        console.log('held', JSON.stringify(summary(held)), JSON.stringify({ ...seen, token: undefined }));
        expect(seen).toMatchObject({ posts: 1, refunds: 0 });
        expect(held.state).not.toBe('completed');
        expect(held.actions[0]!.status).toBe('approved');
        expect(await refunds(s, c.orderId)).toEqual([]);
      } finally {
        await s.stack.restart('audit');
      }
      const done = await waitFor(s, seen.token, seen.workflowId, (x) => x.state === 'completed' || x.state === 'stopped', 60_000);
      console.log('done', JSON.stringify(summary(done)));
      const posts = await paymentPosts(s, c.orderId);
      expect(done.state).toBe('completed');
      expect(done.actions[0]!.status).toBe('succeeded');
      expect((await refunds(s, c.orderId)).map((r) => r.amountCents)).toEqual([2000]);
      expect(posts).toHaveLength(2);
      expect(posts[0]!.status).toBe(429);
      expect([200, 201]).toContain(posts[1]!.status);
      expect(new Set(posts.map((r) => r.idempotencyKey)).size).toBe(1);
    },
  );
});

describe('control removed: audit health is not asked again before a retry (GATEHOUSE_TEST_AUDIT_NOT_RECHECKED_BEFORE_RETRY)', () => {
  let s: HuntStack;
  beforeAll(async () => {
    s = await startHuntStack({ ...ENV, GATEHOUSE_TEST_AUDIT_NOT_RECHECKED_BEFORE_RETRY: '1' });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('the retry after the 429 is sent while audit is down: the refund is paid without audit', { timeout: 120_000 }, async () => {
    const seen = await auditDownDuringRetryWait(s, { ticketId: 'A-429-audit-ctl', orderId: 'O-1007', amount: '20.00' });
    console.log(
      'control removed',
      JSON.stringify({ ...seen, token: undefined }),
      JSON.stringify(summary(await view(s, seen.token, seen.workflowId))),
    );
    expect(seen).toMatchObject({ posts: 2, refunds: 1 });
  });
});
