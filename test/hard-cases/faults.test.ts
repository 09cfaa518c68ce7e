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
  mails,
  stagingRequests,
  fault,
  summary,
  sleep,
  type HuntStack,
} from './helpers.ts';

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

describe('hunt: downstream faults', () => {
  it('429 with Retry-After on the payments ledger: one retry, same key, one refund', async () => {
    await fault(s, { target: 'payments', mode: 'rate_limit', times: 1, retryAfterMs: 1000 });
    await fixtures(s, 'H-429', [fc(['issue_refund', { orderId: 'O-1001', amount: '20.00', reason: 'late' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-429', 'refund');
    const v = await waitFor(s, token, workflowId, settled);
    const reqs = (await stagingRequests(s, '?orderId=O-1001&target=payments')).filter((r) => r.method === 'POST');
    console.log(
      '429',
      JSON.stringify(summary(v)),
      reqs.map((r) => `${String(r.status)} ${String(r.reason)} ${String(r.idempotencyKey)} ${String(r.at)}`),
    );
    expect(v.state).toBe('completed');
    expect(reqs).toHaveLength(2);
    expect(new Set(reqs.map((r) => r.idempotencyKey)).size).toBe(1);
    expect(new Date(String(reqs[1]!.at)).getTime() - new Date(String(reqs[0]!.at)).getTime()).toBeGreaterThanOrEqual(900);
    expect(await refunds(s, 'O-1001')).toHaveLength(1);
  });

  it('payments commits then loses the response: retry with the same key, one refund, succeeded', async () => {
    await fault(s, { target: 'payments', mode: 'commit_then_lose_response', times: 1 });
    await fixtures(s, 'H-pay-lost', [fc(['issue_refund', { orderId: 'O-1006', amount: '20.00', reason: 'late' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-pay-lost', 'refund');
    const v = await waitFor(s, token, workflowId, settled);
    console.log('pay-lost', JSON.stringify(summary(v)));
    expect(v.state).toBe('completed');
    expect(v.actions[0]!.status).toBe('succeeded');
    expect(await refunds(s, 'O-1006')).toHaveLength(1);
  });

  it('a retry refused after an unanswered attempt (epoch bumped between attempts): failed_unknown, not denied', async () => {
    // Attempt 1 commits and its response is lost; attempt 2 is rate-limited; the epoch is bumped
    // (what `gatehouse epoch bump` writes), so attempt 3 is refused as revoked before the
    // idempotency key is looked up. The refusal says nothing about attempt 1 (docs/product/invariants.md#exactly-once).
    await fault(s, { target: 'payments', mode: 'commit_then_lose_response', times: 1 });
    await fault(s, { target: 'payments', mode: 'rate_limit', times: 1, retryAfterMs: 3000 });
    await fixtures(s, 'H-epoch-retry', [fc(['issue_refund', { orderId: 'O-1002', amount: '20.00', reason: 'late' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-epoch-retry', 'refund');
    const posts = async () => (await stagingRequests(s, '?orderId=O-1002&target=payments')).filter((r) => r.method === 'POST');
    for (const until = Date.now() + 60_000; !(await posts()).some((r) => r.status === 429) && Date.now() < until;) await sleep(50);
    await sql`update credential_epochs set epoch = epoch + 1 where id = 1`.execute(s.db.db);
    const v = await waitFor(s, token, workflowId, settled);
    const seen = (await posts()).map((r) => `${String(r.status)} ${String(r.reason)}`);
    expect(seen, 'the third attempt was refused as revoked').toHaveLength(3);
    expect(await refunds(s, 'O-1002')).toHaveLength(1); // the first attempt landed
    expect(v.actions.find((a) => a.tool === 'issue_refund')!.status).toBe('failed_unknown');
    expect(v.state).toBe('needs_reconciliation');
  });

  it('order system creates the shipment and loses the response: read-back decides done; one shipment', async () => {
    await fault(s, { target: 'orders', mode: 'commit_then_lose_response', times: 1 });
    await fixtures(s, 'H-ship-lost', [fc(['reship_order', { orderId: 'O-1007' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-ship-lost', 'reship');
    const v = await waitFor(s, token, workflowId, settled);
    console.log('ship-lost', JSON.stringify(summary(v)));
    expect(v.actions[0]!.status).toBe('succeeded');
    const held = (await shipments(s, 'O-1007')) as Array<{ shipmentId: string }>;
    expect(held).toHaveLength(1);
    const posts = (await stagingRequests(s, '?orderId=O-1007&target=orders')).filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(1);
    // The evidence is the shipment read back, not a placeholder (docs/decisions/0146-execution-audit-fields.md).
    const op = await s.db.db
      .selectFrom('operations')
      .select('evidence_ref')
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(op.evidence_ref).toBe(held[0]!.shipmentId);
  });

  it('mail send with a lost response: failed_unknown, needs_reconciliation, never retried', async () => {
    await fault(s, { target: 'mail', mode: 'commit_then_lose_response', times: 1 });
    await fixtures(s, 'H-mail-lost', [fc(['notify_customer', { orderId: 'O-1008', template: 'apology' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-mail-lost', 'email');
    const v = await waitFor(s, token, workflowId, settled);
    await new Promise((r) => setTimeout(r, 1500));
    console.log('mail-lost', JSON.stringify(summary(v)));
    expect(v.actions[0]!.status).toBe('failed_unknown');
    expect(v.state).toBe('needs_reconciliation');
    expect(await mails(s, 'O-1008')).toHaveLength(1);
    const posts = (await stagingRequests(s, '?orderId=O-1008&target=mail')).filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(1);
  });

  it('5xx storm on payments: capped attempts, same key, no refund, explicit failed outcome; workflow not stuck', async () => {
    await fault(s, { target: 'payments', mode: 'server_error', times: 20, status: 503 });
    await fixtures(s, 'H-5xx', [fc(['issue_refund', { orderId: 'O-0812', amount: '10.00', reason: 'dup' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ben', 'H-5xx', 'refund');
    const v = await waitFor(s, token, workflowId, settled, 60_000);
    const posts = (await stagingRequests(s, '?orderId=O-0812&target=payments')).filter((r) => r.method === 'POST');
    console.log('5xx', JSON.stringify(summary(v)), posts.length);
    await fetch(`${s.url('staging')}/faults`, { method: 'DELETE' });
    expect(posts.length).toBeGreaterThan(1);
    expect(posts.length).toBeLessThanOrEqual(5);
    expect(new Set(posts.map((r) => r.idempotencyKey)).size).toBe(1);
    expect(await refunds(s, 'O-0812')).toHaveLength(0);
    expect(['failed', 'failed_unknown']).toContain(v.actions[0]!.status);
    // A refund that was never made is not reported as plainly done.
    if (v.actions[0]!.status === 'failed') {
      expect(v.state).toBe('completed');
      expect(v.nextStep).toMatch(/^Done, but not carried out: issue_refund on O-0812/);
    }
  });

  it('payments hangs (timeout, unknown write outcome): failed_unknown, needs_reconciliation, not retried after', async () => {
    await fault(s, { target: 'payments', mode: 'hang', times: 20 });
    await fixtures(s, 'H-hang', [fc(['issue_refund', { orderId: 'O-1004', amount: '10.00', reason: 'x' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ben', 'H-hang', 'refund');
    const v = await waitFor(s, token, workflowId, settled, 60_000);
    await fetch(`${s.url('staging')}/faults`, { method: 'DELETE' });
    const before = (await stagingRequests(s, '?orderId=O-1004&target=payments')).length;
    await new Promise((r) => setTimeout(r, 3000));
    const after = (await stagingRequests(s, '?orderId=O-1004&target=payments')).length;
    console.log('hang', JSON.stringify(summary(v)), before, after);
    expect(v.actions[0]!.status).toBe('failed_unknown');
    expect(v.state).toBe('needs_reconciliation');
    expect(after).toBe(before);
  });
});
