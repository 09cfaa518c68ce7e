import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startHuntStack,
  fixtures,
  fc,
  msg,
  submit,
  waitFor,
  waitUntil,
  refunds,
  stagingRequests,
  fault,
  summary,
  sleep,
  cli,
  approve,
  settled,
  type HuntStack,
} from './helpers.ts';
import { sql } from 'kysely';

/**
 * A switch-off that commits while an idempotent write waits out a 429's Retry-After
 * (docs/decisions/0700-a-retry-is-held-by-a-switch-off.md): the first attempt wrote nothing, so
 * the retry is a new effect, and on-call's switch holds it like any step at execution.
 */

const paymentPosts = async (s: HuntStack, orderId: string) =>
  (await stagingRequests(s, `?orderId=${orderId}&target=payments`)).filter((r) => r.method === 'POST');

/** The Retry-After of the 429, ms: long enough for the switch-off CLI on a loaded machine (10 s seen). */
const RETRY_AFTER_MS = 20_000;
/** The executor's deadline and lease, so that the 20 s wait is waited for (default 15 s, 30 s). */
const LONG_DEADLINE = { EXECUTION_DEADLINE_MS: '40000', LEASE_MS: '60000' };
/**
 * The control-removed case's Retry-After, ms, and the executor's deadline and lease that wait it
 * out: its switch-off CLI once took 22 s under a load of 10+, past the 20 s wait.
 */
const CONTROL_RETRY_AFTER_MS = 40_000;
const CONTROL_LONG_DEADLINE = { EXECUTION_DEADLINE_MS: '60000', LEASE_MS: '80000' };

/**
 * Submits a refund whose first payments attempt is refused 429 with a Retry-After of
 * `retryAfterMs` (20 s unless given; approved by lead-eli first when `needsApproval`), switches
 * issue_refund off inside that wait (asserted: committed at least 1 s before the retry is due),
 * then waits past the Retry-After. Returns what the payments ledger saw.
 */
async function switchOffDuringRetryWait(
  s: HuntStack,
  c: { ticketId: string; orderId: string; amount: string; needsApproval: boolean },
  retryAfterMs = RETRY_AFTER_MS,
): Promise<{ token: string; workflowId: string; posts: number; refunds: number }> {
  await fault(s, { target: 'payments', mode: 'rate_limit', times: 1, retryAfterMs });
  await fixtures(s, c.ticketId, [fc(['issue_refund', { orderId: c.orderId, amount: c.amount, reason: 'late' }]), msg()]);
  const { token, workflowId } = await submit(s, 'rep-ana', c.ticketId, `refund ${c.amount} on ${c.orderId}`);
  if (c.needsApproval) {
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    const r = await approve(s, 'lead-eli', v.pendingApprovals[0]!.approvalId);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
  await waitUntil(async () => (await paymentPosts(s, c.orderId)).some((r) => r.status === 429), 'the first attempt rate-limited');
  const limitedAt = new Date(String((await paymentPosts(s, c.orderId))[0]!.at)).getTime();
  await cli(s, ['switch', 'off', 'issue_refund']);
  // The CLI takes seconds on a loaded machine: the switch-off must have committed inside the wait.
  expect(Date.now() - limitedAt, 'switch-off committed inside the Retry-After wait').toBeLessThan(retryAfterMs - 1000);
  // Past the Retry-After: whatever the executor does with the wait has happened.
  await sleep(Math.max(0, limitedAt + retryAfterMs + 4000 - Date.now()));
  return { token, workflowId, posts: (await paymentPosts(s, c.orderId)).length, refunds: (await refunds(s, c.orderId)).length };
}

describe('hunt: a switch-off while a 429 retry waits', () => {
  let s: HuntStack;
  beforeAll(async () => {
    s = await startHuntStack(LONG_DEADLINE);
  });
  afterAll(async () => {
    await cli(s, ['switch', 'on', 'issue_refund']).catch(() => '');
    await s?.close();
  });

  for (const c of [
    { ticketId: 'H-429-off', orderId: 'O-1007', amount: '20.00', needsApproval: false },
    { ticketId: 'H-429-off-appr', orderId: 'O-1004', amount: '120.00', needsApproval: true },
  ]) {
    it(`${c.needsApproval ? 'an approved' : 'an auto-allowed'} refund: the retry is not sent while switched off, the run pauses; switch on pays it once under the same key`, async () => {
      let seen: Awaited<ReturnType<typeof switchOffDuringRetryWait>>;
      try {
        seen = await switchOffDuringRetryWait(s, c);
        const held = await waitFor(s, seen.token, seen.workflowId, (x) => x.state === 'paused' || x.state === 'completed');
        console.log('held', JSON.stringify(summary(held)), JSON.stringify({ ...seen, token: undefined }));
        // Switched off: no further effect. The 429 wrote nothing, so the retry would be a new one.
        expect(seen).toMatchObject({ posts: 1, refunds: 0 });
        expect(held.state).toBe('paused');
        expect(held.actions[0]!.status).toBe('approved');
      } finally {
        await cli(s, ['switch', 'on', 'issue_refund']);
      }
      const done = await waitFor(s, seen.token, seen.workflowId, (x) => x.state === 'completed');
      const posts = await paymentPosts(s, c.orderId);
      expect(done.actions[0]!.status).toBe('succeeded');
      expect(await refunds(s, c.orderId)).toHaveLength(1);
      expect(posts).toHaveLength(2);
      expect(posts[0]!.status).toBe(429);
      expect([200, 201]).toContain(posts[1]!.status);
      expect(new Set(posts.map((r) => r.idempotencyKey)).size).toBe(1);
    });
  }
});

describe('hunt: a held step whose used approval aged past its maximum age (ADR 0707)', () => {
  let s: HuntStack;
  beforeAll(async () => {
    s = await startHuntStack(LONG_DEADLINE);
  });
  afterAll(async () => {
    await cli(s, ['switch', 'on', 'issue_refund']).catch(() => '');
    await s?.close();
  });

  it('switch on after the approval expired: nothing is sent on the stale approval, the run stops approval_expired', async () => {
    const c = { ticketId: 'H-429-off-stale', orderId: 'O-1008', amount: '120.00', needsApproval: true };
    let seen: Awaited<ReturnType<typeof switchOffDuringRetryWait>>;
    try {
      seen = await switchOffDuringRetryWait(s, c);
      const held = await waitFor(s, seen.token, seen.workflowId, (x) => x.state === 'paused' || x.state === 'completed');
      expect(seen).toMatchObject({ posts: 1, refunds: 0 });
      expect(held.state).toBe('paused');
      // The first claim consumed the approval; the hold outlives its maximum age (shortened here).
      const approvals = s.db.db.selectFrom('approvals').select(['id', 'status']).where('workflow_id', '=', seen.workflowId);
      expect((await approvals.execute()).map((a) => a.status)).toEqual(['used']);
      await sql`update approvals set expires_at = now() - interval '1 second' where workflow_id = ${seen.workflowId}`.execute(s.db.db);
    } finally {
      await cli(s, ['switch', 'on', 'issue_refund']);
    }
    const end = await waitFor(s, seen.token, seen.workflowId, settled);
    console.log('stale', JSON.stringify(summary(end)));
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('approval_expired');
    expect(String(end.nextStep)).toMatch(/approv/);
    expect(end.actions[0]!.status).not.toBe('succeeded');
    // Zero calls downstream on the stale approval: only the first attempt's 429.
    expect(await refunds(s, c.orderId)).toEqual([]);
    expect((await paymentPosts(s, c.orderId)).map((r) => r.status)).toEqual([429]);
  });
});

describe('control removed: the switch is not asked again before a retry (GATEHOUSE_TEST_SWITCH_NOT_RECHECKED_BEFORE_RETRY)', () => {
  let s: HuntStack;
  beforeAll(async () => {
    s = await startHuntStack({ ...CONTROL_LONG_DEADLINE, GATEHOUSE_TEST_SWITCH_NOT_RECHECKED_BEFORE_RETRY: '1' });
  });
  afterAll(async () => {
    await cli(s, ['switch', 'on', 'issue_refund']).catch(() => '');
    await s?.close();
  });

  it('the retry after the 429 is sent after the switch-off: the refund is paid while issue_refund is off', async () => {
    try {
      const seen = await switchOffDuringRetryWait(
        s,
        { ticketId: 'H-429-off-ctl', orderId: 'O-1007', amount: '20.00', needsApproval: false },
        CONTROL_RETRY_AFTER_MS,
      );
      console.log('control removed', JSON.stringify({ ...seen, token: undefined }));
      expect(seen).toMatchObject({ posts: 2, refunds: 1 });
      expect((await waitFor(s, seen.token, seen.workflowId, (x) => x.state === 'completed')).actions[0]!.status).toBe('succeeded');
    } finally {
      await cli(s, ['switch', 'on', 'issue_refund']);
    }
  });
});
