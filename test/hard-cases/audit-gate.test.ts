import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approve, fc, fixtures, msg, refunds, settled, sleep, startHuntStack, submit, waitFor, type HuntStack } from './helpers.ts';

// docs/product/hard-cases.md#audit-unavailable: reads may continue; consequential execution stops and the
// approval is left unconsumed; when audit is back the step executes exactly once.

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack({ AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500', AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3000' });
});
afterAll(async () => {
  await s?.close();
});

describe('audit health gates consequential execution', () => {
  it(
    'with the audit service down an approved refund waits unconsumed, reads go on; back up, it runs once',
    // An audit restart (up to 150 s to be ready on a loaded machine) and several multi-hop waits.
    { timeout: 180_000 },
    async () => {
      await fixtures(s, 'A-gate', [fc(['issue_refund', { orderId: 'O-1007', amount: '80.00', reason: 'broken' }]), msg()]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'A-gate', 'refund 80 on O-1007');
      const pending = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);

      await s.stack.kill('audit', 'SIGKILL', { keepDown: true }); // no supervised restart until restart('audit')
      await sleep(2000); // the heartbeat is now older than the gate

      expect((await approve(s, 'lead-eli', pending.pendingApprovals[0]!.approvalId)).status).toBe(200);
      // A read-only ticket still completes meanwhile.
      const read = await submit(s, 'rep-ben', 'A-read', 'What is the status of order O-1001?', 'investigate');
      expect((await waitFor(s, read.token, read.workflowId, settled)).state).toBe('completed');

      // The executor has taken the approved step and refused it for audit health: only then does
      // "nothing ran" mean something (a sleep says nothing about a slow executor).
      const view = await waitFor(s, token, workflowId, (x) => String(x.nextStep ?? '').includes('audit'));
      expect(view.state).not.toBe('completed');
      expect(await refunds(s, 'O-1007')).toEqual([]);
      const held = await s.db.db.selectFrom('approvals').select('status').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
      expect(held.status).toBe('approved'); // not used

      await s.stack.restart('audit');
      const end = await waitFor(s, token, workflowId, settled, 60_000);
      expect(end.state).toBe('completed');
      expect((await refunds(s, 'O-1007')).map((r) => r.amountCents)).toEqual([8000]);
      const used = await s.db.db.selectFrom('approvals').select('status').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
      expect(used.status).toBe('used');
    },
  );

  // Starts a whole stack of its own (150 s per service to be ready on a loaded machine).
  it('control removed (gate wide open): the same refund executes while audit is down', { timeout: 300_000 }, async () => {
    const open = await startHuntStack({ AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '3600000', AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3600000' });
    try {
      await fixtures(open, 'A-open', [fc(['issue_refund', { orderId: 'O-1007', amount: '80.00', reason: 'broken' }]), msg()]);
      const { token, workflowId } = await submit(open, 'rep-ana', 'A-open', 'refund 80 on O-1007');
      const pending = await waitFor(open, token, workflowId, (x) => x.pendingApprovals.length === 1);
      await open.stack.kill('audit', 'SIGKILL', { keepDown: true });
      await sleep(2000);
      expect((await approve(open, 'lead-eli', pending.pendingApprovals[0]!.approvalId)).status).toBe(200);
      await waitFor(open, token, workflowId, settled);
      expect((await refunds(open, 'O-1007')).map((r) => r.amountCents)).toEqual([8000]);
    } finally {
      await open.close();
    }
  });
});
