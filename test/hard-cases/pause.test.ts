import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import {
  startHuntStack,
  fixtures,
  fc,
  msg,
  submit,
  waitFor,
  settled,
  refunds,
  shipments,
  approve,
  cli,
  call,
  sleep,
  waitUntil,
  auditHeartbeatOlderThan,
  type HuntStack,
} from './helpers.ts';

// Pauses and waits (docs/product/states.md#workflow, invariants.md#bounds and #evidence): a run held by a switched-off tool
// stays paused until every held step's tool is on, says which, leaves audit events for the pause
// and the resume, and — like a wait for an approver — the pause is not charged to its working
// time; overlapping waits are credited once. The wall-time budget here is 8 s.

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack({ WALL_TIME_SECONDS: '8' });
});
afterAll(async () => {
  await s?.close();
});

/** The run's audit events, chained or still in the outbox, in order. */
async function runEvents(workflowId: string): Promise<Array<Record<string, unknown>>> {
  const r = await sql<{ event: Record<string, unknown> }>`
    select event from (select event, seq as o from audit_log union all select event, 1e12 + id from audit_outbox) e
    where event->>'runId' = ${workflowId} order by o`.execute(s.db.db);
  return r.rows.map((x) => x.event);
}

async function remainingMs(workflowId: string): Promise<number> {
  const r = await sql<{
    ms: number;
  }>`select extract(epoch from (deadline_at - now())) * 1000 as ms from budgets where workflow_id = ${workflowId}`.execute(s.db.db);
  return Number(r.rows[0]!.ms);
}

describe('hunt: pauses and waits', () => {
  // Paused past the 8 s budget before the first switch-on: the released step's claim must not be
  // charged on-call's wait while the run stays paused for the other tool (ADR 0756). Without the
  // wait, a switch-on CLI slow on a loaded machine charged the same seconds, now and then.
  it('two tools switched off past the budget: switching one on runs its step, the run stays paused naming the other; both on, it completes (audited)', async () => {
    await cli(s, ['switch', 'off', 'issue_refund']);
    await cli(s, ['switch', 'off', 'reship_order']);
    try {
      await fixtures(s, 'P-two-off', [
        fc(['issue_refund', { orderId: 'O-1006', amount: '10.00', reason: 'x' }], ['reship_order', { orderId: 'O-1007' }]),
        msg(),
      ]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'P-two-off', 'refund 10 on O-1006 and reship O-1007');
      await waitFor(s, token, workflowId, (x) => x.state === 'paused' && x.actions.length === 2);
      await sleep(12_000);
      await cli(s, ['switch', 'on', 'issue_refund']);
      const v = await waitFor(s, token, workflowId, (x) => x.actions.find((a) => a.tool === 'issue_refund')?.status === 'succeeded');
      expect(await refunds(s, 'O-1006')).toHaveLength(1);
      expect(await shipments(s, 'O-1007')).toHaveLength(0);
      expect(v.state, 'the reship is still held by its switch').toBe('paused');
      expect(v.nextStep).toMatch(/reship_order is switched off/);
      await cli(s, ['switch', 'on', 'reship_order']);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.state).toBe('completed');
      expect(await shipments(s, 'O-1007')).toHaveLength(1);
      const events = (await runEvents(workflowId)).filter((e) => e.type === 'run.paused' || e.type === 'run.resumed');
      expect(events.map((e) => `${String(e.type)} ${String(e.outcome)}`)).toEqual(['run.paused tool_disabled', 'run.resumed tool_enabled']);
      expect(events[1]!.tool).toBe('reship_order'); // resumed only when the last held tool came back
    } finally {
      await cli(s, ['switch', 'on', 'issue_refund']).catch(() => '');
      await cli(s, ['switch', 'on', 'reship_order']).catch(() => '');
    }
  });

  it('switched off longer than the wall-time budget: switching on resumes the run (the pause is not working time)', async () => {
    await cli(s, ['switch', 'off', 'reship_order']);
    try {
      await fixtures(s, 'P-long-pause', [fc(['reship_order', { orderId: 'O-1001' }]), msg()]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'P-long-pause', 'reship O-1001');
      await waitFor(s, token, workflowId, (x) => x.state === 'paused');
      await sleep(12_000);
      await cli(s, ['switch', 'on', 'reship_order']);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.stopReason ?? null).toBeNull();
      expect(end.state).toBe('completed');
      expect(await shipments(s, 'O-1001')).toHaveLength(1);
    } finally {
      await cli(s, ['switch', 'on', 'reship_order']).catch(() => '');
    }
  });

  it('two approvals waited on at once: the wait is credited once, and the run still completes', async () => {
    await fixtures(s, 'P-two-wait', [
      fc(
        ['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: 'cracked' }],
        ['issue_refund', { orderId: 'O-1004', amount: '120.00', reason: 'cracked' }],
      ),
      msg(),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'P-two-wait', 'refund 120 on O-1002 and O-1004');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.filter((p) => p.status === 'pending').length === 2);
    await sleep(20_000); // both approvals wait ~20 s side by side
    for (const p of v.pendingApprovals) expect((await approve(s, 'lead-eli', p.approvalId)).status).toBe(200);
    // Credited twice, the run would have about 28 s left of an 8 s budget.
    expect(await remainingMs(workflowId)).toBeLessThanOrEqual(8_000);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1002')).toHaveLength(1);
    expect(await refunds(s, 'O-1004')).toHaveLength(1);
  });

  // docs/decisions/0750-the-wait-for-an-approval-starts-at-its-action.md: the run waits on the
  // approval from its action's decision, also while the approval service is down and has not
  // opened the approval yet. Each case keeps that service down longer than the 8 s budget.
  async function waitForApprovalToOpen(ticketId: string, text: string): Promise<{ token: string; workflowId: string }> {
    await s.stack.kill('approval', 'SIGKILL', { keepDown: true });
    try {
      const run = await submit(s, 'rep-ana', ticketId, text);
      await waitFor(s, run.token, run.workflowId, (x) => x.actions.some((a) => a.status === 'pending_approval'));
      await sleep(12_000);
      return run;
    } finally {
      await s.stack.restart('approval');
    }
  }

  it('the approval opens late (approval service down past the budget), then a lead approves: the refund runs, not budget_exhausted', async () => {
    await fixtures(s, 'P-late-open', [fc(['issue_refund', { orderId: 'O-1007', amount: '120.00', reason: 'cracked' }]), msg()]);
    const { token, workflowId } = await waitForApprovalToOpen('P-late-open', 'refund 120 on O-1007');
    const open = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.some((p) => p.status === 'pending'));
    expect((await approve(s, 'lead-eli', open.pendingApprovals[0]!.approvalId)).status).toBe(200);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.stopReason ?? null).toBeNull();
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1007')).toHaveLength(1);
  });

  it('a follow-up while the approval has not opened yet (approval service down past the budget): the model takes its turn, not budget_exhausted', async () => {
    await fixtures(s, 'P-late-follow', [fc(['issue_refund', { orderId: 'O-1008', amount: '120.00', reason: 'cracked' }]), msg()]);
    const { token, workflowId } = await waitForApprovalToOpen('P-late-follow', 'refund 120 on O-1008');
    const r = await call('POST', `${s.url('agent-loop')}/v1/workflows/${workflowId}/messages`, token, { text: 'never mind' });
    expect(r.status).toBe(202);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.stopReason ?? null).toBeNull();
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1008')).toHaveLength(0);
  });

  // docs/decisions/0751-a-follow-up-ends-the-wait-on-a-held-step.md: a step held by the audit gate
  // has its outage credited only by its claim; a follow-up that supersedes it credits that wait.
  it('a follow-up while an allowed refund is held by the audit gate past the budget: the model takes its turn, not budget_exhausted', async () => {
    await fixtures(s, 'P-audit-follow', [fc(['issue_refund', { orderId: 'O-1001', amount: '10.00', reason: 'cracked' }]), msg()]);
    await s.stack.kill('audit', 'SIGKILL', { keepDown: true });
    try {
      await waitUntil(() => auditHeartbeatOlderThan(s.db.db, 12), 'a stale audit heartbeat', 60_000);
      const { token, workflowId } = await submit(s, 'rep-ana', 'P-audit-follow', 'refund 10 on O-1001');
      await waitFor(s, token, workflowId, (x) => String(x.nextStep ?? '').includes('audit'));
      await sleep(12_000);
      const r = await call('POST', `${s.url('agent-loop')}/v1/workflows/${workflowId}/messages`, token, { text: 'never mind' });
      expect(r.status).toBe(202);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.stopReason ?? null).toBeNull();
      expect(end.state).toBe('completed');
      expect(await refunds(s, 'O-1001')).toHaveLength(0);
    } finally {
      await s.stack.restart('audit');
    }
  });
});
