import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import {
  approve,
  fc,
  fixtures,
  getApproval,
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

// The largest amount the system holds is 21,474,836.47 (2^31 - 1 cents, the ledger's integer amount
// columns; docs/decisions/0689-the-largest-amount.md). A tool call asking for more is refused where
// arguments are normalized: the model gets the bounded validation result, and nothing downstream
// runs — no action, no decision, no approval, no payments call. The largest amount itself is an
// amount like any other: policy decides it (R3 above support-p1's maximum refund), and a reship of an
// order paid exactly that much opens its approval for it, which a lead's limit then refuses.

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

const db = () => s.db.db;
const paymentPosts = async (orderId: string) =>
  (await stagingRequests(s, `?orderId=${orderId}&target=payments`)).filter((r) => r.method === 'POST');
const approvalsOf = (workflowId: string) =>
  db().selectFrom('approvals').select(['amount_cents', 'status', 'tool']).where('workflow_id', '=', workflowId).execute();

describe('the largest amount (ADR 0689)', () => {
  it('a refund of 21474836.48 is refused as invalid arguments: the model is told the maximum; no action, approval or payments call', async () => {
    await fixtures(s, 'A-over', [fc(['issue_refund', { orderId: 'O-1006', amount: '21474836.48', reason: 'damaged' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'A-over', 'refund 21474836.48 on O-1006');
    const v = await waitFor(s, token, workflowId, settled);
    expect(v.state).toBe('completed');
    expect(v.actions).toEqual([]);
    const proposal = await db()
      .selectFrom('proposals')
      .select(['status', 'validation_error'])
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(proposal.status).toBe('invalid');
    expect(JSON.stringify(proposal.validation_error)).toContain('amount must be at most 21474836.47');
    const decided = await sql<{ n: string }>`select count(*) as n from decision_log where workflow_id = ${workflowId}`.execute(db());
    expect(Number(decided.rows[0]!.n)).toBe(0);
    expect(await approvalsOf(workflowId)).toEqual([]);
    expect(await paymentPosts('O-1006')).toEqual([]);
    expect(await refunds(s, 'O-1006')).toEqual([]);
    const seen = (await modelRequests(s, 'A-over')).requests;
    const answer = JSON.stringify((seen[1]!.input as unknown[]).at(-1));
    expect(answer).toContain('invalid_arguments');
    expect(answer).toContain('21474836.47');
  });

  it('a refund of exactly 21474836.47 is an amount: policy decides it (R3 above the maximum refund), nothing paid', async () => {
    await fixtures(s, 'A-max', [fc(['issue_refund', { orderId: 'O-1006', amount: '21474836.47', reason: 'damaged' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'A-max', 'refund 21474836.47 on O-1006');
    const v = await waitFor(s, token, workflowId, (x) => settled(x) && x.actions.length === 1);
    expect(v.actions.map((a) => [a.arguments.amountCents, a.decision, a.ruleId, a.status])).toEqual([
      [2_147_483_647, 'DENY', 'R3', 'denied'],
    ]);
    expect(await approvalsOf(workflowId)).toEqual([]);
    expect(await paymentPosts('O-1006')).toEqual([]);
  });

  it('a reship of an order paid exactly 21474836.47 opens its approval for that amount; a lead whose limit is lower is refused', async () => {
    await sql`insert into staging.orders (id, tenant, region, customer, paid_cents, status)
      values ('O-9901', 'quillfeather', 'US', 'cust-8', ${2 ** 31 - 1}, 'shipped')`.execute(db());
    await fixtures(s, 'A-reship', [fc(['reship_order', { orderId: 'O-9901' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'A-reship', 'reship O-9901');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    expect(v.actions.map((a) => [a.tool, a.decision, a.ruleId, a.status])).toEqual([
      ['reship_order', 'REQUIRE_APPROVAL', 'R9', 'pending_approval'],
    ]);
    expect(await approvalsOf(workflowId)).toEqual([{ amount_cents: 2 ** 31 - 1, status: 'pending', tool: 'reship_order' }]);
    const approvalId = v.pendingApprovals[0]!.approvalId;
    expect((await getApproval(s, 'lead-eli', approvalId)).body.amountCents).toBe(2 ** 31 - 1);
    const refused = await approve(s, 'lead-eli', approvalId);
    expect([refused.status, (refused.body.error as { reason?: string } | undefined)?.reason]).toEqual([403, 'approve_limit_too_low']);
    expect(await stagingRequests(s, '?orderId=O-9901&target=orders')).toEqual([]);
  });
});
