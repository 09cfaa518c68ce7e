import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startHuntStack,
  fixtures,
  fc,
  msg,
  submit,
  waitFor,
  settled,
  decide,
  getApproval,
  refunds,
  fault,
  modelRequests,
  sleep,
  call,
  cli,
  type HuntStack,
} from './helpers.ts';

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/** Operations the staging change service holds for `workflowId`: under the operation keys of its actions. */
async function changeOperations(workflowId: string): Promise<Array<Record<string, unknown>>> {
  const r = await sql<
    Record<string, unknown>
  >`select * from staging.change_operations where operation_key in (select operation_key from actions where workflow_id = ${workflowId})`.execute(
    s.db.db,
  );
  return r.rows;
}

const followUp = (token: string, id: string, text: string) =>
  call('POST', `${s.url('agent-loop')}/v1/workflows/${id}/messages`, token, { text });

type Viewed = Awaited<ReturnType<typeof waitFor>>;

/**
 * Waits until the run of `workflowId` has a pending approval other than `old` (or settles), runs
 * `first` on that view, has own-kim approve the new approval (200 expected) and returns the view
 * before the decision and the run's view once it settled.
 */
async function approveTheNewSchedule(
  token: string,
  workflowId: string,
  old: { approvalId: string },
  first: (after: Viewed) => Promise<void> = async () => undefined,
): Promise<{ after: Viewed; end: Viewed }> {
  const after = await waitFor(
    s,
    token,
    workflowId,
    (x) => settled(x) || x.pendingApprovals.some((p) => p.status === 'pending' && p.approvalId !== old.approvalId),
  );
  await first(after);
  const fresh = after.pendingApprovals.find((p) => p.approvalId !== old.approvalId)!;
  const decided = await decide(s, 'own-kim', fresh.approvalId, {
    decision: 'approve',
    actionVersion: fresh.actionVersion,
    actionDigest: fresh.actionDigest,
  });
  expect(decided.status).toBe(200);
  return { after, end: await waitFor(s, token, workflowId, settled) };
}

describe('hunt: follow-up messages', () => {
  it('change pack: a follow-up repeating the schedule while it awaits its owner: the old approval is void, the schedule again is the next version with its own approval, one operation', async () => {
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'F-chg',
      'Please schedule change CHG-101 in the next maintenance window.',
      'act',
      'change',
    );
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
    const v1 = v.actions.find((a) => a.tool === 'schedule_change')!;
    expect(v1.status).toBe('pending_approval');
    const old = v.pendingApprovals[0]!;
    const m = await followUp(token, workflowId, 'Please schedule change CHG-101 in the next maintenance window.');
    expect(m.status).toBe(202);
    expect(m.body.superseded).toEqual([{ version: v1.version, tool: 'schedule_change', voidedApprovals: [old.approvalId] }]);
    const { after, end } = await approveTheNewSchedule(token, workflowId, old, async () => {
      // The voided approval of version 1 cannot be decided any more: 409 while the run goes on.
      const stale = await decide(s, 'own-kim', old.approvalId, {
        decision: 'approve',
        actionVersion: old.actionVersion,
        actionDigest: old.actionDigest,
      });
      expect(stale.status).toBe(409);
    });
    const v2 = after.actions.find((a) => a.tool === 'schedule_change' && a.version > v1.version)!;
    expect(v2).toMatchObject({
      decision: 'REQUIRE_APPROVAL',
      ruleId: 'C5',
      status: 'pending_approval',
      target: v1.target,
      supersedesVersion: v1.version,
    });
    expect(end.state).toBe('completed');
    const ops = await changeOperations(workflowId);
    expect(ops.map((o) => o.operation_key)).toEqual([v2.operationKey]);
    expect((await modelRequests(s, 'F-chg')).pairingErrors).toBe(0);
  });

  it('change pack: a follow-up moving the window while the schedule awaits its owner: a new plan, scheduled once with the new window', async () => {
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'F-chg-w',
      'Please schedule change CHG-102 in the next maintenance window.',
      'act',
      'change',
    );
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
    const old = v.pendingApprovals[0]!;
    const m = await followUp(token, workflowId, 'Sorry, schedule change CHG-102 in the manual window instead.');
    expect(m.status).toBe(202);
    const { end } = await approveTheNewSchedule(token, workflowId, old);
    expect(end.state).toBe('completed');
    const ops = await changeOperations(workflowId);
    expect(ops.map((o) => o.window)).toEqual(['manual-window']);
  });

  it('change pack: a follow-up while a prepared plan waits for its schedule proposal keeps the plan schedulable: the schedule awaits its owner', async () => {
    // The model's turn after the plan is held by two 503s (its retry-after), so the follow-up lands
    // between the plan and the schedule proposal.
    const slow = { type: 'error' as const, status: 503, headers: { 'retry-after-ms': '1500' } };
    await fixtures(s, 'F-chg-ready', [
      fc(['lookup_change', { changeId: 'CHG-101' }]),
      fc(['prepare_change', { changeId: 'CHG-101', window: 'next-maintenance-window', note: null }]),
      slow,
      slow,
    ]);
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'F-chg-ready',
      'Please schedule change CHG-101 in the next maintenance window.',
      'act',
      'change',
    );
    const ready = await waitFor(s, token, workflowId, (x) => x.state === 'awaiting_approval' || settled(x));
    expect(ready.actions.map((a) => `${a.tool}:${a.status}`)).toEqual(['lookup_change:succeeded', 'prepare_change:succeeded']);
    const m = await followUp(token, workflowId, 'Any update on this?');
    expect([m.status, m.body.superseded]).toEqual([202, []]);
    const end = await waitFor(s, token, workflowId, (x) => settled(x) || x.pendingApprovals.length > 0);
    // Not "Done" with the plan never scheduled because schedule_change was no longer offered.
    expect(end.state).toBe('awaiting_approval');
    const plan = await s.db.db.selectFrom('change_plans').select('id').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
    const schedule = end.actions.find((a) => a.tool === 'schedule_change')!;
    expect(schedule).toMatchObject({ decision: 'REQUIRE_APPROVAL', ruleId: 'C5', status: 'pending_approval', target: plan.id });
    expect(await changeOperations(workflowId)).toEqual([]);
  });

  it('change pack: a follow-up asking for another window while a prepared plan waits for its schedule proposal: the plan is not scheduled with that window (C4), nothing reaches the change service (ADR 0677 consequences)', async () => {
    const slow = { type: 'error' as const, status: 503, headers: { 'retry-after-ms': '1500' } };
    await fixtures(s, 'F-chg-win', [
      fc(['lookup_change', { changeId: 'CHG-102' }]),
      fc(['prepare_change', { changeId: 'CHG-102', window: 'next-maintenance-window', note: null }]),
      slow,
      slow,
    ]);
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'F-chg-win',
      'Please schedule change CHG-102 in the next maintenance window.',
      'act',
      'change',
    );
    const ready = await waitFor(s, token, workflowId, (x) => x.state === 'awaiting_approval' || settled(x));
    expect(ready.actions.map((a) => `${a.tool}:${a.status}`)).toEqual(['lookup_change:succeeded', 'prepare_change:succeeded']);
    const m = await followUp(token, workflowId, 'Sorry, schedule change CHG-102 in the manual window instead.');
    expect([m.status, m.body.superseded]).toEqual([202, []]);
    const end = await waitFor(s, token, workflowId, (x) => settled(x) || x.pendingApprovals.length > 0);
    // Only schedule_change is offered in awaiting_approval: the plan's window cannot be moved there.
    expect(end.pendingApprovals).toEqual([]);
    expect(end.actions.filter((a) => a.tool === 'schedule_change').map((a) => [a.arguments.window, a.decision, a.ruleId])).toEqual([
      ['manual-window', 'DENY', 'C4'],
    ]);
    expect(end.actions.filter((a) => a.tool === 'prepare_change')).toHaveLength(1);
    expect(await changeOperations(workflowId)).toEqual([]);
  });

  it('change pack: a follow-up asking for another window after the change was scheduled: not prepared or scheduled again, one operation', async () => {
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'F-chg-again',
      'Please schedule change CHG-101 in the next maintenance window.',
      'act',
      'change',
    );
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
    const first = v.pendingApprovals[0]!;
    // The model's turn after the schedule ran is held by two 503s (its retry-after), so the
    // follow-up lands after the schedule succeeded and before the model's final message.
    const slow = { type: 'error' as const, status: 503, headers: { 'retry-after-ms': '1500' } };
    await fixtures(s, 'F-chg-again', [slow, slow]);
    const ok = await decide(s, 'own-kim', first.approvalId, {
      decision: 'approve',
      actionVersion: first.actionVersion,
      actionDigest: first.actionDigest,
    });
    expect(ok.status).toBe(200);
    const ran = await waitFor(s, token, workflowId, (x) => x.actions.some((a) => a.tool === 'schedule_change' && a.status === 'succeeded'));
    const done = ran.actions.find((a) => a.tool === 'schedule_change')!;
    const m = await followUp(token, workflowId, 'Please schedule change CHG-101 in the manual window instead.');
    expect([m.status, m.body.superseded]).toEqual([202, []]);
    const end = await waitFor(s, token, workflowId, (x) => settled(x) || x.pendingApprovals.some((p) => p.approvalId !== first.approvalId));
    // Not a second approval and a second schedule of CHG-101: the new plan is refused (C2), naming the schedule that holds it.
    expect(end.state).toBe('completed');
    expect(end.pendingApprovals.filter((p) => p.approvalId !== first.approvalId)).toEqual([]);
    const again = end.actions.filter((a) => a.tool === 'prepare_change').at(-1)!;
    expect(again).toMatchObject({
      decision: 'DENY',
      ruleId: 'C2',
      arguments: { changeId: 'CHG-101', window: 'manual-window', note: null },
    });
    // The model sees rule C2 only; the decision log keeps the reason, naming the schedule that holds the change.
    const logged = await s.db.db
      .selectFrom('decision_log')
      .select('detail')
      .where('action_id', '=', again.actionId)
      .executeTakeFirstOrThrow();
    expect(JSON.stringify(logged.detail)).toContain(`plan ${done.target}, succeeded, operation ${done.operationKey}`);
    expect(end.actions.filter((a) => a.tool === 'schedule_change').map((a) => a.status)).toEqual(['succeeded']);
    const plans = await s.db.db.selectFrom('change_plans').select('window').where('workflow_id', '=', workflowId).execute();
    expect(plans.map((p) => p.window)).toEqual(['next-maintenance-window']);
    const ops = await changeOperations(workflowId);
    expect(ops.map((o) => [o.operation_key, o.window])).toEqual([[done.operationKey, 'next-maintenance-window']]);
  });

  it('a follow-up repeating a refund already paid, formatted differently ("30.00" then 30): suppressed, one refund', async () => {
    await fixtures(s, 'F-same', [
      fc(['issue_refund', { orderId: 'O-1002', amount: '30.00', reason: 'dented' }]),
      fc(['issue_refund', { orderId: 'O-1004', amount: '90.00', reason: 'cracked' }]),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ben', 'F-same', 'refund 30 on O-1002 and 90 on O-1004');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    expect(v.actions[0]).toMatchObject({ target: 'O-1002', status: 'succeeded' });
    await fixtures(s, 'F-same', [fc(['issue_refund', { orderId: 'O-1002', amount: 30, reason: 'dented' }]), msg('Already refunded.')]);
    const m = await followUp(token, workflowId, 'Please make sure O-1002 got its 30 dollars back; skip O-1004.');
    expect(m.status).toBe(202);
    expect(m.body.superseded).toHaveLength(1);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(end.actions.map((a) => `${a.target}:${a.status}`)).toEqual(['O-1002:succeeded', 'O-1004:superseded', 'O-1002:suppressed']);
    expect((await refunds(s, 'O-1002')).map((r) => r.amountCents)).toEqual([3000]);
    expect(await refunds(s, 'O-1004')).toEqual([]);
  });

  it('change pack: a follow-up while the approved schedule is held (tool off): superseded, the next version needs its own approval, then runs once', async () => {
    await cli(s, ['switch', 'off', 'schedule_change']);
    try {
      const { token, workflowId } = await submit(
        s,
        'eng-lou',
        'F-chg-held',
        'Please schedule change CHG-102 in the manual window.',
        'act',
        'change',
      );
      const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
      const old = v.pendingApprovals[0]!;
      expect(
        (
          await decide(s, 'own-kim', old.approvalId, {
            decision: 'approve',
            actionVersion: old.actionVersion,
            actionDigest: old.actionDigest,
          })
        ).status,
      ).toBe(200);
      await waitFor(s, token, workflowId, (x) => x.state === 'paused');
      const m = await followUp(token, workflowId, 'Please schedule change CHG-102 in the manual window.');
      expect(m.status).toBe(202);
      expect(m.body.superseded).toEqual([{ version: old.actionVersion, tool: 'schedule_change', voidedApprovals: [old.approvalId] }]);
      const after = await waitFor(
        s,
        token,
        workflowId,
        (x) => settled(x) || x.pendingApprovals.some((p) => p.approvalId !== old.approvalId),
      );
      const fresh = after.pendingApprovals.find((p) => p.approvalId !== old.approvalId)!;
      expect(fresh.actionVersion).toBeGreaterThan(old.actionVersion);
      await cli(s, ['switch', 'on', 'schedule_change']);
      await sleep(1500);
      expect(await changeOperations(workflowId)).toEqual([]);
      expect(
        (
          await decide(s, 'own-kim', fresh.approvalId, {
            decision: 'approve',
            actionVersion: fresh.actionVersion,
            actionDigest: fresh.actionDigest,
          })
        ).status,
      ).toBe(200);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.state).toBe('completed');
      expect((await changeOperations(workflowId)).length).toBe(1);
    } finally {
      await cli(s, ['switch', 'on', 'schedule_change']);
    }
  });

  it('a follow-up while the refund is claimed and running: not superseded, runs once, the model then sees the follow-up', async () => {
    await fixtures(s, 'F-run', [fc(['issue_refund', { orderId: 'O-1008', amount: '20.00', reason: 'x' }]), msg('Refunded.')]);
    await fault(s, { target: 'payments', mode: 'latency', latencyMs: 4000, times: 1 });
    const { token, workflowId } = await submit(s, 'rep-ana', 'F-run', 'refund 20 on O-1008');
    const running = await waitFor(s, token, workflowId, (x) => x.actions.some((a) => a.status === 'running'));
    const m = await followUp(token, workflowId, 'The box was also wet, just so you know.');
    expect(m.status).toBe(202);
    expect(m.body.superseded).toEqual([]);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(end.actions.find((a) => a.actionId === running.actions[0]!.actionId)!.status).toBe('succeeded');
    expect((await refunds(s, 'O-1008')).map((r) => r.amountCents)).toEqual([2000]);
    const seen = await modelRequests(s, 'F-run');
    expect(seen.pairingErrors).toBe(0);
    expect(JSON.stringify(seen.requests.at(-1)!.input)).toContain('box was also wet');
  });

  it('two follow-ups at once while a refund awaits approval: both reach the model, the refund is superseded once', async () => {
    await fixtures(s, 'F-two', [fc(['issue_refund', { orderId: 'O-1005', amount: '80.00', reason: 'x' }]), msg('Noted both.')]);
    const { token, workflowId } = await submit(s, 'rep-ben', 'F-two', 'refund 80 on O-1005');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    const [a, b] = await Promise.all([
      followUp(token, workflowId, 'First note: the customer called.'),
      followUp(token, workflowId, 'Second note: hold off on the refund.'),
    ]);
    expect([a.status, b.status]).toEqual([202, 202]);
    expect([...(a.body.superseded as unknown[]), ...(b.body.superseded as unknown[])]).toHaveLength(1);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(end.actions[0]!.status).toBe('superseded');
    expect((await getApproval(s, 'lead-eli', v.pendingApprovals[0]!.approvalId)).body.status).toBe('void');
    const seen = await modelRequests(s, 'F-two');
    expect(seen.pairingErrors).toBe(0);
    const last = JSON.stringify(seen.requests.at(-1)!.input);
    expect(last).toContain('First note');
    expect(last).toContain('Second note');
    expect(await refunds(s, 'O-1005')).toEqual([]);
  });

  it('a follow-up racing the approval decision: at most one refund, and none without an approval of the version that ran', async () => {
    // O-1004 paid 450.00 and nothing else of this file refunds it: the four rounds' refunds of 60.00
    // fit under its amount whichever rounds pay (on O-1007, 150.00, a third paid round was denied R4).
    for (let i = 0; i < 4; i++) {
      const t = `F-race-${i}`;
      await fixtures(s, t, [fc(['issue_refund', { orderId: 'O-1004', amount: '60.00', reason: 'x' }]), msg('Done.')]);
      const { token, workflowId } = await submit(s, 'rep-ana', t, 'refund 60 on O-1004');
      const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
      const p = v.pendingApprovals[0]!;
      const before = (await refunds(s, 'O-1004')).length;
      if (i % 2) await sleep(i * 7);
      const [d, m] = await Promise.all([
        decide(s, 'lead-eli', p.approvalId, { decision: 'approve', actionVersion: p.actionVersion, actionDigest: p.actionDigest }),
        (async () => {
          if (i >= 2) await sleep(i * 15);
          return followUp(token, workflowId, 'Just checking in on this.');
        })(),
      ]);
      const end = await waitFor(s, token, workflowId, settled);
      const paid = (await refunds(s, 'O-1004')).length - before;
      expect(m.status).toBe(202);
      expect(end.state).toBe('completed');
      const sup = (m.body.superseded as unknown[]).length;
      if (sup === 1) expect(paid).toBe(0);
      else expect(paid).toBe(d.status === 200 ? 1 : 0);
      expect((await modelRequests(s, t)).pairingErrors).toBe(0);
    }
  });
});

describe('hunt: a follow-up ends a wait on a person, which is not working time (docs/decisions/0015-working-time.md)', () => {
  /** Moves the run's working-time deadline and `column` of its waits back by `seconds`, as if all of it had started that long ago. */
  async function agedBy(workflowId: string, seconds: number): Promise<void> {
    await sql`update budgets set deadline_at = deadline_at - make_interval(secs => ${seconds}), paused_at = paused_at - make_interval(secs => ${seconds}) where workflow_id = ${workflowId}`.execute(
      s.db.db,
    );
    // Every record of the wait ages alike: an action is never recorded after its approval opened.
    await sql`update actions set created_at = created_at - make_interval(secs => ${seconds}) where workflow_id = ${workflowId}`.execute(
      s.db.db,
    );
    await sql`update approvals set created_at = created_at - make_interval(secs => ${seconds}) where workflow_id = ${workflowId}`.execute(
      s.db.db,
    );
  }

  it('after two minutes of waiting for a lead, the follow-up voids the approval and the model takes its turn: not budget_exhausted', async () => {
    await fixtures(s, 'F-wait', [
      fc(['issue_refund', { orderId: 'O-1001', amount: '80.00', reason: 'cracked' }]),
      msg('Holding the refund as asked.'),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'F-wait', 'refund 80 on O-1001');
    await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    await agedBy(workflowId, 120); // the lead took two minutes; the run's own work took seconds
    const m = await followUp(token, workflowId, 'Never mind, hold the refund for now.');
    expect(m.status).toBe(202);
    const end = await waitFor(s, token, workflowId, settled);
    expect([end.state, end.stopReason]).toEqual(['completed', null]);
    expect(end.finalMessage).toBe('Holding the refund as asked.');
    expect(await refunds(s, 'O-1001')).toEqual([]);
  });

  it('after two minutes held by a switched-off tool, the follow-up supersedes the held refund and the model takes its turn: not budget_exhausted', async () => {
    await cli(s, ['switch', 'off', 'issue_refund']);
    try {
      await fixtures(s, 'F-held', [
        fc(['issue_refund', { orderId: 'O-1006', amount: '20.00', reason: 'x' }]),
        msg('Dropped the refund as asked.'),
      ]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'F-held', 'refund 20 on O-1006');
      await waitFor(s, token, workflowId, (x) => x.state === 'paused');
      await agedBy(workflowId, 120); // on-call kept the tool off for two minutes
      const m = await followUp(token, workflowId, 'Drop the refund, the customer found the parcel.');
      expect(m.status).toBe(202);
      expect(m.body.superseded).toHaveLength(1);
      const end = await waitFor(s, token, workflowId, (x) => x.state === 'completed' || x.state === 'stopped');
      expect([end.state, end.stopReason]).toEqual(['completed', null]);
      const budget = await s.db.db
        .selectFrom('budgets')
        .select('paused_at')
        .where('workflow_id', '=', workflowId)
        .executeTakeFirstOrThrow();
      expect(budget.paused_at).toBeNull(); // the pause ended with the follow-up: a later pause is not counted from it
    } finally {
      await cli(s, ['switch', 'on', 'issue_refund']);
    }
    expect(await refunds(s, 'O-1006')).toEqual([]);
  });
});
