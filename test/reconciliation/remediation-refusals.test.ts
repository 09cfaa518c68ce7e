import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executeRemediation, requestRemediation } from '@gatehouse/reconciliation';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { freePort, TcpCut } from '@gatehouse/test-harness';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// A refusal of a system of record is not an outage (docs/decisions/0050): when the order system or
// the payments ledger answers a 4xx — it understood the request and rejected it — the remediation
// ends with an explicit refusal carrying the system's reason and the next step, and nothing is sent
// again; an ambiguous answer (5xx, connection lost) stays a retry. Against the real staging
// systems: a read the order system's HTTP server rejects (431), a refund above the approving
// lead's delegated ceiling (403 ceiling_exceeded), a 503 fault, a cut connection.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, liveItem, op, approvedRemediation } = reconOps(() => h);

/** A succeeded refund step the ledger lacks (`agent_done_ledger_missing`): its live item, after a pass. */
async function lostRefund(amountCents: number) {
  const orderId = await h.newOrder(5_000_000);
  const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents, opStatus: 'succeeded' });
  await pass();
  return { orderId, step, item: await liveItem(`op:${step.key}`) };
}

/** Requests a replay of `itemId` and lets lead-eli approve it (what the approval API writes). */
async function approvedReplay(itemId: string) {
  const t = await approvedRemediation(itemId, 'replay');
  return t;
}

const reconWorkflows = (itemId: string) =>
  h.db.selectFrom('workflows').select(['id', 'state', 'stop_reason', 'next_step']).where('ticket_id', 'like', `recon_${itemId}%`).execute();

describe('requesting a remediation: the order system refuses the read', () => {
  it('a 4xx is a refusal with the status and the next step, not an outage: nothing requested, zero effect calls', async () => {
    const { orderId, item } = await lostRefund(2_000);
    // An order id the order system's HTTP server rejects outright (431: the request line is too large).
    const refusedId = `O-${'9'.repeat(20_000)}`;
    await h.db.updateTable('reconciliation_items').set({ order_id: refusedId }).where('id', '=', item.id).execute();
    const asked = requestRemediation(remediation(), { itemId: item.id, remediation: 'replay', operator: 'ops-gus' });
    await expect(asked).rejects.toMatchObject({ name: 'RemediationRefused', reason: 'order_system_refused' });
    await expect(requestRemediation(remediation(), { itemId: item.id, remediation: 'replay', operator: 'ops-gus' })).rejects.toThrow(
      /refused to read the order of item .* \(431 headers_too_large\): nothing was requested.*repair it by hand/,
    );
    expect((await liveItem(item.subject)).approval_id).toBeNull();
    expect(await reconWorkflows(item.id)).toEqual([]);
    expect(await h.requests(orderId)).toEqual([]);
  });

  it('a cut connection stays an outage (DependencyUnavailable, retry later), nothing requested', async () => {
    const { item } = await lostRefund(2_000);
    const port = new URL(h.stagingUrl).port;
    const cut = new TcpCut(await freePort(), { host: '127.0.0.1', port: Number(port) });
    await cut.open();
    await cut.cut();
    const asked = requestRemediation(
      { ...remediation(), stagingUrl: `http://127.0.0.1:${cut.port}` },
      { itemId: item.id, remediation: 'replay', operator: 'ops-gus' },
    );
    await expect(asked).rejects.toBeInstanceOf(DependencyUnavailable);
    expect((await liveItem(item.subject)).approval_id).toBeNull();
    expect(await reconWorkflows(item.id)).toEqual([]);
  });
});

describe('executing a remediation: the payments ledger answers', () => {
  it('a 4xx ends it refused with the ledger’s reason and the next step; executing again sends nothing', async () => {
    // 2,000,000 cents is above lead-eli's delegated ceiling (50,000): the ledger refuses the replay itself.
    const { orderId, item } = await lostRefund(2_000_000);
    await approvedReplay(item.id);
    const o = await executeRemediation(remediation(), item.id);
    expect(o).toMatchObject({ state: 'failed', itemId: item.id, reason: '403:ceiling_exceeded' });
    expect(o.state === 'failed' && o.nextStep).toMatch(
      new RegExp(`refused the remediation \\(403:ceiling_exceeded\\); it is not sent again.*gatehouse reconcile resolve ${item.id}`),
    );
    expect(await op(`recon_${item.id}`)).toMatchObject({ status: 'failed', error: '403:ceiling_exceeded' });
    const [wf] = await reconWorkflows(item.id);
    expect(wf).toMatchObject({ state: 'stopped', stop_reason: 'denied', next_step: o.state === 'failed' ? o.nextStep : '' });
    // Not retried: the item is open for another request, and executing again calls nothing.
    expect((await liveItem(item.subject)).approval_id).toBeNull();
    await expect(executeRemediation(remediation(), item.id)).rejects.toMatchObject({ reason: 'no_remediation' });
    expect((await h.requests(orderId)).map((r) => [r.status, r.reason])).toEqual([[403, 'ceiling_exceeded']]);
  });

  it('a 5xx stays a retry under the same key, and the next execution pays once', async () => {
    const { orderId, step, item } = await lostRefund(3_000);
    const t = await approvedReplay(item.id);
    await h.arm({ target: 'payments', mode: 'server_error', status: 503, times: 1 });
    expect(await executeRemediation(remediation(), item.id)).toMatchObject({ state: 'retry', itemId: item.id });
    expect((await liveItem(item.subject)).approval_id).toBe(t.approvalId);
    expect(await op(`recon_${item.id}`)).toMatchObject({ status: 'pending' });
    expect((await executeRemediation(remediation(), item.id)).state).toBe('resolved');
    expect((await h.refunds(orderId)).map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[step.key, 3_000]]);
  });

  it('a 408 (the request was not read in time) stays a retry under the same key, not a refusal (it was failed)', async () => {
    const { orderId, step, item } = await lostRefund(3_500);
    const t = await approvedReplay(item.id);
    await h.arm({ target: 'payments', mode: 'request_timeout', times: 1 });
    expect(await executeRemediation(remediation(), item.id)).toMatchObject({
      state: 'retry',
      itemId: item.id,
      reason: '408:request_timeout',
      waitingFor: { on: 'system_of_record' },
    });
    expect((await liveItem(item.subject)).approval_id).toBe(t.approvalId);
    expect(await op(`recon_${item.id}`)).toMatchObject({ status: 'pending' });
    expect(await reconWorkflows(item.id)).not.toContainEqual(expect.objectContaining({ state: 'stopped' }));
    expect((await executeRemediation(remediation(), item.id)).state).toBe('resolved');
    expect((await h.requests(orderId)).map((r) => r.status)).toEqual([408, 201]);
    expect((await h.refunds(orderId)).map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[step.key, 3_000 + 500]]);
  });
});

describe('requesting a remediation: an amount above the largest an approval holds (ADR 0689)', () => {
  it('is refused amount_too_large before anything is written (it was a raw integer-out-of-range database error)', async () => {
    const { orderId, item } = await lostRefund(2_000);
    // The ledger's items hold bigint cents: one 2^31 cents (the payments ledger of a real system may hold it).
    await h.db
      .updateTable('reconciliation_items')
      .set({ amount_cents: String(2 ** 31) })
      .where('id', '=', item.id)
      .execute();
    const asked = requestRemediation(remediation(), { itemId: item.id, remediation: 'replay', operator: 'ops-gus' });
    await expect(asked).rejects.toMatchObject({ name: 'RemediationRefused', reason: 'amount_too_large' });
    expect((await liveItem(item.subject)).approval_id).toBeNull();
    expect(await reconWorkflows(item.id)).toEqual([]);
    expect(await h.requests(orderId)).toEqual([]);
    // The largest amount itself opens its approval.
    await h.db
      .updateTable('reconciliation_items')
      .set({ amount_cents: String(2 ** 31 - 1) })
      .where('id', '=', item.id)
      .execute();
    const t = await requestRemediation(remediation(), { itemId: item.id, remediation: 'replay', operator: 'ops-gus' });
    expect(t.amountCents).toBe(2 ** 31 - 1);
    const row = await h.db
      .selectFrom('approvals')
      .select(['amount_cents', 'status'])
      .where('id', '=', t.approvalId)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ amount_cents: 2 ** 31 - 1, status: 'pending' });
  });
});
