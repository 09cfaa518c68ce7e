import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approve,
  cli,
  fc,
  fixtures,
  modelRequests,
  msg,
  refunds,
  settled,
  stagingRequests,
  startHuntStack,
  submit,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// Two controls shown load-bearing through every service as a process (issue #17): strict parsing
// (an `approved_by` field is refused before any adapter call, docs/product/hard-cases.md#malformed-proposals)
// and the switch checked at the moment of execution, not at admission
// (docs/product/hard-cases.md#tool-switched-off-mid-run). `on` is the designed system; `off` runs
// with GATEHOUSE_TEST_DISABLE_STRICT_PARSING and GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY
// (docs/decisions/0140-more-control-removed-switches.md).

let on: HuntStack;
let off: HuntStack;
beforeAll(async () => {
  [on, off] = await Promise.all([
    startHuntStack(),
    startHuntStack({ GATEHOUSE_TEST_DISABLE_STRICT_PARSING: '1', GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY: '1' }),
  ]);
});
afterAll(async () => {
  await Promise.all([on?.close(), off?.close()]);
});

const withApprovedBy = { orderId: 'O-1006', amount: '10.00', reason: 'late', approved_by: 'lead-eli' };

/** POSTs the payments ledger received for `orderId`. */
async function paymentPosts(s: HuntStack, orderId: string): Promise<Array<Record<string, unknown>>> {
  return (await stagingRequests(s, `?orderId=${orderId}&target=payments`)).filter((r) => r.method === 'POST');
}

describe('control: strict parsing', () => {
  it('designed: an extra approved_by field is refused before any adapter call; the model gets a short validation result', async () => {
    await fixtures(on, 'K-strict', [fc(['issue_refund', withApprovedBy]), msg()]);
    const { token, workflowId } = await submit(on, 'rep-ana', 'K-strict', 'refund 10 on O-1006');
    const v = await waitFor(on, token, workflowId, settled);
    expect(v.state).toBe('completed');
    expect(v.actions).toEqual([]);
    const proposal = await on.db.db
      .selectFrom('proposals')
      .select(['status', 'validation_error'])
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(proposal.status).toBe('invalid');
    expect(JSON.stringify(proposal.validation_error)).toContain('approved_by');
    expect(await paymentPosts(on, 'O-1006')).toEqual([]);
    expect(await refunds(on, 'O-1006')).toEqual([]);
    // The call was answered with the bounded validation result (the second model request's last input).
    const seen = (await modelRequests(on, 'K-strict')).requests;
    const answer = JSON.stringify((seen[1]!.input as unknown[]).at(-1));
    expect(answer).toContain('invalid_arguments');
    expect(answer.length).toBeLessThan(1000);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_STRICT_PARSING): the approved_by field reaches the adapter and the refund is paid', async () => {
    await fixtures(off, 'K-strict', [fc(['issue_refund', withApprovedBy]), msg()]);
    const { token, workflowId } = await submit(off, 'rep-ana', 'K-strict', 'refund 10 on O-1006');
    const v = await waitFor(off, token, workflowId, settled);
    const action = await off.db.db
      .selectFrom('actions')
      .select(['status', 'arguments'])
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    // The executor hands the adapter the action's arguments: the unvetted field is among them.
    expect(action).toEqual({
      status: 'succeeded',
      arguments: { orderId: 'O-1006', amountCents: 1000, reason: 'late', approved_by: 'lead-eli' },
    });
    expect(v.state).toBe('completed');
    expect(await paymentPosts(off, 'O-1006')).toHaveLength(1);
    expect(await refunds(off, 'O-1006')).toHaveLength(1);
  });
});

/**
 * An 80.00 refund (above the auto limit) is admitted and waits for a lead; the tool is switched
 * off; then the lead approves. Returns the run's state once it settles, pauses or its refund
 * succeeded. The caller switches the tool back on.
 */
async function switchedOffAfterAdmission(s: HuntStack): Promise<{ state: string; workflowId: string }> {
  await fixtures(s, 'K-switch', [fc(['issue_refund', { orderId: 'O-1007', amount: '80.00', reason: 'broken' }]), msg()]);
  const { token, workflowId } = await submit(s, 'rep-ana', 'K-switch', 'refund 80 on O-1007');
  const pending = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
  expect(pending.state).toBe('awaiting_approval');
  await cli(s, ['switch', 'off', 'issue_refund']);
  const r = await approve(s, 'lead-eli', pending.pendingApprovals[0]!.approvalId);
  expect(r.status).toBe(200);
  const v = await waitFor(s, token, workflowId, (x) => settled(x) || x.actions[0]?.status === 'succeeded');
  return { state: v.state, workflowId };
}

describe('control: the switch is checked at execution', () => {
  it('designed: a tool switched off after admission is held at execution — paused, nothing paid', async () => {
    try {
      const { state } = await switchedOffAfterAdmission(on);
      expect(state).toBe('paused');
      expect(await paymentPosts(on, 'O-1007')).toEqual([]);
    } finally {
      await cli(on, ['switch', 'on', 'issue_refund']);
    }
  });

  it('control removed (GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY): the switched-off tool still executes — 80.00 paid', async () => {
    try {
      const { workflowId } = await switchedOffAfterAdmission(off);
      // Paid while the tool was still switched off.
      expect(await refunds(off, 'O-1007')).toEqual([expect.objectContaining({ amountCents: 8000 })]);
      const sw = await off.db.db.selectFrom('tool_switches').select('enabled').where('tool', '=', 'issue_refund').executeTakeFirstOrThrow();
      expect(sw.enabled).toBe(false);
      const action = await off.db.db.selectFrom('actions').select('status').where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
      expect(action.status).toBe('succeeded');
    } finally {
      await cli(off, ['switch', 'on', 'issue_refund']);
    }
  });
});
