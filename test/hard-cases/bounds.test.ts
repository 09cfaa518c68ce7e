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
  refunds,
  summary,
  approve,
  cli,
  sleep,
  type HuntStack,
} from './helpers.ts';

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack({ WALL_TIME_SECONDS: '8' });
});
afterAll(async () => {
  await s?.close();
});

describe('hunt: bounds and eligibility', () => {
  it('waiting for an approval does not use the run’s working time: approved after the budget span, it executes', async () => {
    await fixtures(s, 'H-wait', [fc(['issue_refund', { orderId: 'O-1004', amount: '120.00', reason: 'cracked' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-wait', 'refund 120 O-1004');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    await sleep(9000); // longer than WALL_TIME_SECONDS=8, all of it spent waiting for the lead
    expect((await approve(s, 'lead-eli', v.pendingApprovals[0]!.approvalId)).status).toBe(200);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1004')).toHaveLength(1);
  });

  it('wall time is checked before dispatch: with the working time used up, an approved refund does not execute', async () => {
    await fixtures(s, 'H-wall', [fc(['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: 'cracked' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-wall', 'refund 120 O-1002');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    // The run's working time is spent (as if its earlier steps had used it all).
    await sql`update budgets set deadline_at = now() - interval '1 hour' where workflow_id = ${workflowId}`.execute(s.db.db);
    const r = await approve(s, 'lead-eli', v.pendingApprovals[0]!.approvalId);
    expect(r.status).toBe(200);
    const end = await waitFor(s, token, workflowId, settled);
    expect(await refunds(s, 'O-1002')).toHaveLength(0);
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('budget_exhausted');
    // The approval was not consumed: it ended, voided, with the stopped run, and its refund no
    // longer counts as queued (docs/decisions/0610-a-stopped-run-ends-its-unclaimed-actions.md).
    const row = await s.db.db.selectFrom('approvals').select('status').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
    expect(row.status).toBe('void');
    expect(end.actions.map((a) => a.status)).toEqual(['superseded']);
  });

  it('investigate mode: a write tool proposed anyway is denied (R1), zero effects', async () => {
    await fixtures(s, 'H-inv-write', [
      fc(['issue_refund', { orderId: 'O-1001', amount: '10.00', reason: 'x' }], ['reship_order', { orderId: 'O-1001' }]),
      msg(),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-inv-write', 'what happened to order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled);
    console.log('inv', JSON.stringify(summary(end)));
    expect(end.actions.every((a) => a.decision === 'DENY' && a.ruleId === 'R1')).toBe(true);
    expect(await refunds(s, 'O-1001')).toHaveLength(0);
  });

  it('a switched-off tool holds only its own step: parallel reads proceed, the workflow is paused and resumes on switch on', async () => {
    await cli(s, ['switch', 'off', 'issue_refund']);
    try {
      await fixtures(s, 'H-paused-reads', [
        fc(
          ['issue_refund', { orderId: 'O-1006', amount: '10.00', reason: 'x' }],
          ['lookup_order', { orderId: 'O-1006' }],
          ['lookup_order', { orderId: 'O-1007' }],
          ['lookup_order', { orderId: 'O-1008' }],
        ),
        msg(),
      ]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'H-paused-reads', 'refund 10 on O-1006');
      const v = await waitFor(
        s,
        token,
        workflowId,
        (x) => x.actions.length === 4 && x.actions.filter((a) => a.tool === 'lookup_order').every((a) => a.status === 'succeeded'),
      );
      // The refund's execution job is held (the workflow paused) by the executor on its own schedule:
      // the lookups succeeding says nothing about it, so wait for the workflow to settle.
      const v2 = await waitFor(s, token, workflowId, settled);
      console.log('paused reads', JSON.stringify(summary(v2)));
      expect(v.actions.filter((a) => a.tool === 'lookup_order').map((a) => a.decision)).toEqual(['ALLOW', 'ALLOW', 'ALLOW']);
      expect.soft(v2.state, 'state while the refund is held').toBe('paused');
      await cli(s, ['switch', 'on', 'issue_refund']);
      const end = await waitFor(s, token, workflowId, (x) => x.state === 'completed').catch((e: Error) => {
        console.log('not resumed', e.message);
        return null;
      });
      expect(end?.state).toBe('completed');
      expect(await refunds(s, 'O-1006')).toHaveLength(1);
    } finally {
      await cli(s, ['switch', 'on', 'issue_refund']).catch(() => '');
    }
  });
});
