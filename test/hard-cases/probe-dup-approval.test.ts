import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHuntStack, fixtures, fc, msg, submit, waitFor, settled, refunds, summary, approve, type HuntStack } from './helpers.ts';

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

describe('probe: approvals in a run with several actions on one tool + target', () => {
  it('the same over-limit refund twice in ONE response ("120.00" and 120): one approval, approvable, one refund', async () => {
    await fixtures(s, 'P-dup-appr', [
      fc(
        ['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: 'cracked' }],
        ['issue_refund', { orderId: 'O-1002', amount: 120, reason: 'cracked' }],
      ),
      msg(),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'P-dup-appr', 'refund 120 O-1002');
    const v = await waitFor(
      s,
      token,
      workflowId,
      (x) => x.actions.length === 2 && x.pendingApprovals.length === 1 && x.actions.every((a) => a.status !== 'proposed'),
    );
    console.log('dup-appr', JSON.stringify(summary(v)));
    const r = await approve(s, 'lead-eli', v.pendingApprovals[0]!.approvalId);
    console.log('approve', r.status, JSON.stringify(r.body));
    const end = await waitFor(s, token, workflowId, settled, 30_000).catch(() => null);
    console.log('end', JSON.stringify(summary(end ?? undefined)));
    expect(r.status).toBe(200);
    expect(await refunds(s, 'O-1002')).toHaveLength(1);
  });

  it('two distinct over-limit refunds on one order in one response: each has its own approval and the first is approvable', async () => {
    await fixtures(s, 'P-two-appr', [
      fc(
        ['issue_refund', { orderId: 'O-1004', amount: '60.00', reason: 'item 1 cracked' }],
        ['issue_refund', { orderId: 'O-1004', amount: '70.00', reason: 'item 2 cracked' }],
      ),
      msg(),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'P-two-appr', 'refund 60 and 70 on O-1004');
    const v = await waitFor(s, token, workflowId, (x) => x.actions.length === 2 && x.pendingApprovals.length === 2);
    console.log('two-appr', JSON.stringify(summary(v)));
    const first = [...v.pendingApprovals].sort((a, b) => a.actionVersion - b.actionVersion)[0]!;
    const r = await approve(s, 'lead-eli', first.approvalId);
    console.log('approve first', r.status, JSON.stringify(r.body));
    expect(r.status).toBe(200);
  });
});
