import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { executeRemediation, requestRemediation, type RemediationOutcome } from '@gatehouse/reconciliation';
import { refundSums } from '@gatehouse/policy';
import { actorHash, type Remediation } from '@gatehouse/ledger';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedRefund, seedShipment, seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// A lead-approved remediation leaves the step it repairs in a state that agrees with the system of
// record, through the one transitions module (docs/decisions/0050, amended): an adopted refund under a
// failed step's key settles that step `succeeded`; a replay of a step already settled leaves its
// record as written; a ratified count mismatch naming undecided reships names each one's outcome and
// settles them, so their runs end (docs/decisions/0691). Real passes and remediations over a real ledger and the staging systems.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, liveItem, op, approvedRemediation } = reconOps(() => h);
const actionStatus = async (id: string) =>
  (await h.db.selectFrom('actions').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

/** Requests `kind` on the live item of `subject`, lets lead-eli approve it (what the approval API writes), and executes it. */
async function remediate(subject: string, kind: Remediation, outcomes?: Record<string, string | null>): Promise<RemediationOutcome> {
  const item = await liveItem(subject);
  await approvedRemediation(item.id, kind, outcomes);
  return executeRemediation(remediation(), item.id);
}

describe('a remediation settles the step it repairs', () => {
  it("adopting the ledger's refund under a failed step's key settles the step succeeded with that refund, and the next pass matches it", async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'failed' });
    const refundId = await seedRefund(h.db, { key: step.key, orderId, amountCents: 3_000 });
    await pass();
    const item = await liveItem(`refund:${refundId}`);
    expect([item.class, item.operation_key, item.detail]).toMatchObject(['ledger_entry_without_step', step.key, { stepStatus: 'failed' }]);

    expect((await remediate(`refund:${refundId}`, 'adopt')).state).toBe('resolved');
    // The remediation's own run completed, and said so like every run that completes (ADR 0755).
    const run = await h.db
      .selectFrom('workflows')
      .select(['id', 'state'])
      .where('ticket_id', '=', `recon_${item.id}`)
      .executeTakeFirstOrThrow();
    expect(run.state).toBe('completed');
    const completed = await sql<{ service: string; outcome: string; actor: string | null }>`select event->>'service' as service,
      event->>'outcome' as outcome, event->>'actorHash' as actor from audit_outbox
      where event->>'type' = 'run.completed' and event->>'runId' = ${run.id}`.execute(h.db);
    expect(completed.rows).toEqual([{ service: 'reconciliation', outcome: 'reconciled', actor: actorHash(AUDIT_HMAC_KEY, 'lead-eli') }]);
    expect(await op(step.key)).toMatchObject({ status: 'succeeded', evidence_ref: refundId, error: null });
    expect(await actionStatus(step.actionId)).toBe('succeeded');
    const reconciled = await sql<{ n: string }>`select count(*) as n from audit_outbox
      where event->>'type' = 'operation.reconciled' and event->>'runId' = ${step.workflowId} and event->>'effectRef' = ${refundId}`.execute(
      h.db,
    );
    expect(Number(reconciled.rows[0]!.n)).toBe(1);

    const again = await pass();
    const mine = again.findings.filter((d) => d.finding.orderId === orderId).map((d) => d.finding.class);
    expect(mine).toEqual(['matched']);
    // Counted once: by the step, now that it counts (ADR 0686).
    const sums = await refundSums(h.db, { tenant: 'quillfeather', orderId, userId: 'rep-ana', includeQueued: true });
    expect(sums.orderCents).toBe(3_000);
  });

  it("a replay of a succeeded step whose refund the ledger lacks leaves the step's recorded evidence; the replay's refund is the remediation's", async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'succeeded' });
    await h.db.updateTable('operations').set({ evidence_ref: 're_as_recorded' }).where('key', '=', step.key).execute();
    await pass();
    expect((await liveItem(`op:${step.key}`)).class).toBe('agent_done_ledger_missing');
    const before = await op(step.key);

    const outcome = await remediate(`op:${step.key}`, 'replay');
    expect(outcome.state).toBe('resolved');
    const [refund] = await h.refunds(orderId);
    expect([refund?.idempotencyKey, refund?.amountCents]).toEqual([step.key, 3_000]);
    const after = await op(step.key);
    expect(after).toMatchObject({ status: 'succeeded', evidence_ref: 're_as_recorded', result: before.result });
    // The replay's refund is recorded where the replay's outcome is: its operation and the item's resolution.
    const item = await h.db
      .selectFrom('reconciliation_items')
      .selectAll()
      .where('subject', '=', `op:${step.key}`)
      .executeTakeFirstOrThrow();
    expect(item.resolution).toContain(refund!.refundId);
    const remediationOp = await h.db
      .selectFrom('operations')
      .select(['evidence_ref', 'status'])
      .where('key', '=', `recon_${item.id}`)
      .executeTakeFirstOrThrow();
    expect(remediationOp).toEqual({ status: 'succeeded', evidence_ref: refund!.refundId });
  });

  it('a ratification of undecided reships must name each one’s outcome; it then settles them and their parked runs complete', async () => {
    const orderId = await h.newOrder();
    const seed = () =>
      seedStep(h.db, {
        tool: 'reship_order',
        orderId,
        opStatus: 'failed_unknown',
        baselineShipments: 0,
        workflowState: 'needs_reconciliation',
      });
    const [a, b] = [await seed(), await seed()];
    const shipmentId = await seedShipment(h.db, orderId, { shipmentId: `shp_${a.key.slice(0, 8)}`, createdInMs: 1000 });
    await pass();
    const keys = [a.key, b.key].sort();
    const subject = `order:${orderId}:in_flight:${[a.key, b.key].join(',')}`;
    const item = await liveItem(subject);
    expect(item.detail).toMatchObject({ undecidedOperations: [a.key, b.key], unclaimedShipmentIds: [shipmentId] });

    // Refused, with the way forward, and nothing written: no outcomes, an incomplete or foreign set, a cancellation first.
    const ask = (kind: Remediation, outcomes?: Record<string, string | null>) =>
      requestRemediation(remediation(), { itemId: item.id, remediation: kind, operator: 'ops-gus', outcomes });
    const undecided = { name: 'RemediationRefused', reason: 'undecided_operations' };
    await expect(ask('ratify')).rejects.toMatchObject(undecided);
    await expect(ask('ratify')).rejects.toThrow(/--outcome <operationKey>=<shipmentId\|none>/);
    await expect(ask('ratify', { [a.key]: shipmentId })).rejects.toMatchObject(undecided);
    await expect(ask('ratify', { [a.key]: 'shp_not_standing', [b.key]: null })).rejects.toMatchObject(undecided);
    await expect(ask('ratify', { [a.key]: shipmentId, [b.key]: shipmentId })).rejects.toMatchObject(undecided);
    await expect(ask('cancel_shipment')).rejects.toMatchObject(undecided);
    expect((await liveItem(subject)).approval_id).toBeNull();

    const outcome = await remediate(subject, 'ratify', { [a.key]: shipmentId, [b.key]: null });
    expect(outcome.state).toBe('resolved');
    expect(await op(a.key)).toMatchObject({ status: 'succeeded', evidence_ref: shipmentId });
    expect(await op(b.key)).toMatchObject({ status: 'failed', evidence_ref: null });
    expect([await actionStatus(a.actionId), await actionStatus(b.actionId)]).toEqual(['succeeded', 'failed']);
    const runs = await h.db
      .selectFrom('workflows')
      .select(['id', 'state', 'next_step'])
      .where('id', 'in', [a.workflowId, b.workflowId])
      .execute();
    expect(runs.map((r) => r.state)).toEqual(['completed', 'completed']);
    for (const r of runs) expect(r.next_step).toMatch(/^Reconciled: reship_order (succeeded|failed) \(ratified by a lead/);
    // The approval bound the outcomes the lead decided on.
    const bound = await h.db
      .selectFrom('actions')
      .select('arguments')
      .where('operation_key', '=', `recon_${item.id}`)
      .executeTakeFirstOrThrow();
    expect(bound.arguments.outcomes).toEqual(Object.fromEntries(keys.map((k) => [k, k === a.key ? shipmentId : null])));

    // The records agree now: the order's one shipment is the ratified reship's.
    const again = await pass();
    expect(again.findings.filter((d) => d.finding.orderId === orderId).map((d) => d.finding.class)).toEqual(['matched']);
    expect(again.worklist.filter((i) => i.order_id === orderId)).toEqual([]);
  });
});
