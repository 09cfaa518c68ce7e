import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import {
  decide,
  fault,
  settled,
  stagingRequests,
  startHuntStack,
  submit,
  summary,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// `schedule_change` (the change pack's one consequential tool, an idempotent write to the staging
// change service) under each fault the staging service can inject, through every service as a
// process. The outcomes are those of docs/product/hard-cases.md#lost-responses-and-faults for an
// idempotent write: a 429 gets one retry after Retry-After with the same key; a 5xx is retried
// and a storm ends in a capped, explicit failure; a commit whose response is lost or late is
// retried under the same key and replayed (one operation); a hang is an unknown outcome —
// failed_unknown, needs_reconciliation, never retried after.

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/** Operations the change service holds for `workflowId`: under the operation keys of its actions. */
async function changeOperations(workflowId: string): Promise<unknown[]> {
  const r =
    await sql`select * from staging.change_operations where operation_key in (select operation_key from actions where workflow_id = ${workflowId})`.execute(
      s.db.db,
    );
  return r.rows;
}

/**
 * Takes a change ticket to its pending schedule, arms `spec` on the change service, lets the change
 * owner approve and waits for the run to settle. Returns the run, the schedule's status and the
 * schedule POSTs the change service received.
 */
async function scheduleUnder(ticketId: string, spec: Record<string, unknown> | null) {
  const { token, workflowId } = await submit(
    s,
    'eng-lou',
    ticketId,
    'Please schedule change CHG-101 in the next maintenance window.',
    'act',
    'change',
  );
  const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
  expect(v.state).toBe('awaiting_approval');
  const p = v.pendingApprovals[0]!;
  if (spec) await fault(s, { target: 'changes', ...spec });
  const ok = await decide(s, 'own-kim', p.approvalId, {
    decision: 'approve',
    actionVersion: p.actionVersion,
    actionDigest: p.actionDigest,
  });
  expect(ok.status).toBe(200);
  const done = await waitFor(
    s,
    token,
    workflowId,
    (x) => settled(x) && x.actions.find((a) => a.tool === 'schedule_change')?.status !== 'running',
    90_000,
  );
  const schedule = done.actions.find((a) => a.tool === 'schedule_change')!;
  const runKeys = new Set(done.actions.map((a) => a.operationKey));
  const posts = (await stagingRequests(s, '?target=changes')).filter(
    (r) => r.method === 'POST' && runKeys.has(String(r.idempotencyKey ?? '')),
  );
  if (process.env.TEST_LOG_LEVEL) console.info(ticketId, JSON.stringify(summary(done)), posts);
  return { workflowId, state: done.state, status: schedule.status, posts, keys: new Set(posts.map((r) => r.idempotencyKey)) };
}

describe('schedule_change under staging faults', () => {
  it('429 with Retry-After: one retry with the same key after the delay, one operation, completed', async () => {
    const r = await scheduleUnder('CF-429', { mode: 'rate_limit', times: 1, retryAfterMs: 1000 });
    expect(r.posts.map((p) => p.status)).toEqual([429, 201]);
    expect(r.keys.size).toBe(1);
    expect(Date.parse(String(r.posts[1]!.at)) - Date.parse(String(r.posts[0]!.at))).toBeGreaterThanOrEqual(900);
    expect(r.status).toBe('succeeded');
    expect(r.state).toBe('completed');
    expect(await changeOperations(r.workflowId)).toHaveLength(1);
  });

  it('one 5xx: retried with the same key, one operation, completed', async () => {
    const r = await scheduleUnder('CF-5xx', { mode: 'server_error', times: 1, status: 502 });
    expect(r.posts.map((p) => p.status)).toEqual([502, 201]);
    expect(r.keys.size).toBe(1);
    expect(r.status).toBe('succeeded');
    expect(await changeOperations(r.workflowId)).toHaveLength(1);
  });

  it('commit then lose the response: the retry under the same key is replayed — one operation, succeeded', async () => {
    const r = await scheduleUnder('CF-lost', { mode: 'commit_then_lose_response', times: 1 });
    expect(r.posts.map((p) => p.reason)).toEqual(['fault:commit_then_lose_response', 'idempotent_replay']);
    expect(r.keys.size).toBe(1);
    expect(r.status).toBe('succeeded');
    expect(await changeOperations(r.workflowId)).toHaveLength(1);
  });

  it('commit after the client timed out (7 s latency, 5 s attempt timeout): the retry and the late commit are one operation', async () => {
    const r = await scheduleUnder('CF-late', { mode: 'latency', times: 1, latencyMs: 7000 });
    expect(r.status).toBe('succeeded');
    expect(r.keys.size).toBe(1);
    // the late first attempt lands after the retry created the operation: it is a replay
    await waitFor_(
      async () => (await stagingRequests(s, '?target=changes')).filter((p) => p.idempotencyKey === [...r.keys][0]).length >= 2,
    );
    expect(await changeOperations(r.workflowId)).toHaveLength(1);
  });

  it('hang (no answer, no effect): failed_unknown, needs_reconciliation, no operation at the change service', async () => {
    const r = await scheduleUnder('CF-hang', { mode: 'hang', times: 20 });
    expect(r.status).toBe('failed_unknown');
    expect(r.state).toBe('needs_reconciliation');
    await fetch(`${s.url('staging')}/faults`, { method: 'DELETE' });
    const before = r.posts.length;
    expect(before).toBeGreaterThanOrEqual(1);
    expect(before).toBeLessThanOrEqual(4);
    expect(await changeOperations(r.workflowId)).toEqual([]);
    // An unknown outcome is never retried automatically (docs/product/hard-cases.md#timeout-with-unknown-outcome).
    const op = await s.db.db
      .selectFrom('operations')
      .select('status')
      .where('workflow_id', '=', r.workflowId)
      .where('tool', '=', 'schedule_change')
      .executeTakeFirstOrThrow();
    expect(op.status).toBe('failed_unknown');
  });

  it('5xx storm: capped attempts with the same key, no operation, an explicit failure', async () => {
    const r = await scheduleUnder('CF-storm', { mode: 'server_error', times: 50, status: 503 });
    await fetch(`${s.url('staging')}/faults`, { method: 'DELETE' });
    expect(r.posts.length).toBeLessThanOrEqual(4);
    expect(r.keys.size).toBeLessThanOrEqual(1);
    expect(r.status).toBe('failed');
    expect(r.state).not.toBe('needs_reconciliation');
    expect(await changeOperations(r.workflowId)).toEqual([]);
  });
});

async function waitFor_(cond: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  for (const until = Date.now() + timeoutMs; Date.now() < until; await new Promise((r) => setTimeout(r, 200))) if (await cond()) return;
  throw new Error('condition not met in time');
}
