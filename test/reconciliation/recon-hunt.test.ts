import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { AuditUnavailable } from '@gatehouse/ledger';
import {
  classify,
  closeVanished,
  executeApprovedRemediations,
  executeRemediation,
  findItem,
  readSnapshot,
  recordFinding,
  requestRemediation,
  type Finding,
} from '@gatehouse/reconciliation';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedRefund, seedShipment, seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// Reconciliation over a real ledger and the staging systems of record, seeded straight into both.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, op, approvedRemediation } = reconOps(() => h, 10_000);
/** Asks for `kind` on the live item of `subject`, and lets lead-eli approve it (what the approval API writes for a `RECON` approval). */
async function approved(subject: string, kind: 'ratify' | 'reverse' | 'replay') {
  const item = await h.db
    .selectFrom('reconciliation_items')
    .selectAll()
    .where('subject', '=', subject)
    .where('status', 'in', ['open', 'frozen'])
    .executeTakeFirstOrThrow();
  const t = await approvedRemediation(item.id, kind);
  return t;
}
const approvalStatus = async (id: string) =>
  (await h.db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;
const beatAt = (at: Date) => h.db.updateTable('audit_heartbeat').set({ beat_at: at }).where('id', '=', 1).execute();
/** A shipment of `orderId` the order system made `inMs` from now (its listing is oldest first). */
const ship = (orderId: string, id: string, inMs: number) => seedShipment(h.db, orderId, { shipmentId: id, createdInMs: inMs });
const evidence = (key: string, ref: string) => h.db.updateTable('operations').set({ evidence_ref: ref }).where('key', '=', key).execute();

describe('reconciliation: reships', () => {
  it('an in-flight reship whose one new shipment is older than its dispatch is not resumed with that shipment: the order system lacks it (ADR 0678)', async () => {
    const orderId = await h.newOrder();
    // Someone outside Gatehouse ships the order after the baseline was read, before the call went out.
    await h.staging
      .insertInto('staging.shipments')
      .values({
        shipment_id: 'shp_by_someone_else',
        order_id: orderId,
        tenant: 'quillfeather',
        requester: 'ops-desk',
        actor: 'ops-desk',
        created_at: new Date(Date.now() - 5000),
      })
      .execute();
    // The reship's POST got a 503 (nothing made); the executor's read-back refused the older shipment: failed_unknown.
    const step = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'failed_unknown', baselineShipments: 0, answered: false });

    const report = await pass();
    const mine = report.findings.filter((d) => d.finding.orderId === orderId).map((d) => d.finding);
    // The order system lacks this reship (the one new shipment is someone else's), and that shipment is surplus.
    expect(mine.map((f) => [f.class, f.subject])).toEqual([
      ['in_flight_ledger_lacks_it', `op:${step.key}`],
      ['shipment_count_mismatch', `order:${orderId}:surplus+1`],
    ]);
    expect(mine[0]!.detail).toMatchObject({ madeBeforeDispatch: 'shp_by_someone_else' });
    expect(mine[1]!.detail).toMatchObject({ unclaimedShipmentIds: ['shp_by_someone_else'] });
    expect(await op(step.key)).toMatchObject({ status: 'failed_unknown', evidence_ref: null });
    expect(report.resumed).toBe(0);
  });

  it('an in-flight reship whose one new shipment the order system made after its dispatch is resumed with it', async () => {
    const orderId = await h.newOrder();
    const step = await seedStep(h.db, {
      tool: 'reship_order',
      orderId,
      opStatus: 'failed_unknown',
      baselineShipments: 0,
      answered: false,
      workflowState: 'needs_reconciliation',
    });
    await ship(orderId, `shp_${step.key.slice(0, 8)}`, 1000);
    const report = await pass();
    expect(report.findings.filter((d) => d.finding.orderId === orderId).map((d) => [d.finding.class, d.disposition])).toEqual([
      ['in_flight_ledger_has_it', 'resumed'],
    ]);
    expect(await op(step.key)).toMatchObject({ status: 'succeeded', evidence_ref: `shp_${step.key.slice(0, 8)}` });
  });

  it('two reships of one order: the in-flight one is never resumed with the shipment the other one recorded as its own', async () => {
    const orderId = await h.newOrder();
    // b was proposed first but dispatched after a's baseline; it succeeded with its shipment.
    const b = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'succeeded', baselineShipments: 0 });
    // a's POST was refused (503, nothing made) and its read-back saw a rival: failed_unknown.
    const a = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'failed_unknown', baselineShipments: 0, answered: false });
    await ship(orderId, `shp_b_${orderId}`, 1000);
    await evidence(b.key, `shp_b_${orderId}`);

    const report = await pass();
    const mine = report.findings.filter((d) => d.finding.orderId === orderId);
    expect(mine.map((d) => [d.finding.class, d.finding.operationKey, d.disposition])).toEqual([
      ['in_flight_ledger_lacks_it', a.key, 'new'],
      ['matched', b.key, 'matched'],
    ]);
    expect(await op(a.key)).toMatchObject({ status: 'failed_unknown', evidence_ref: null });
  });

  it('two reships of one order: the in-flight one is resumed with its own shipment, not the later one’s', async () => {
    const orderId = await h.newOrder();
    const a = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'failed_unknown', baselineShipments: 0, answered: false });
    await ship(orderId, `shp_a_${orderId}`, 1000); // a's POST made it; its answer was lost
    const b = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'succeeded', baselineShipments: 1 });
    await ship(orderId, `shp_b_${orderId}`, 2000);
    await evidence(b.key, `shp_b_${orderId}`);

    const report = await pass();
    const mine = report.findings.filter((d) => d.finding.orderId === orderId);
    expect(mine.map((d) => [d.finding.class, d.finding.operationKey, d.disposition])).toEqual([
      ['in_flight_ledger_has_it', a.key, 'resumed'],
      ['matched', b.key, 'matched'],
    ]);
    expect(await op(a.key)).toMatchObject({ status: 'succeeded', evidence_ref: `shp_a_${orderId}` });
  });
});

describe('reconciliation: remediations while audit storage is unavailable', () => {
  it('the job’s batch holds every approved remediation (approval left unused) and does not throw, so the pass still runs', async () => {
    const orderId = await h.newOrder();
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3000, opStatus: 'succeeded' });
    await pass();
    const t = await approved(`op:${step.key}`, 'ratify');
    await beatAt(new Date(Date.now() - 3_600_000)); // the audit service stopped beating an hour ago
    try {
      // One item alone: refused with the audit outage, as `gatehouse reconcile resolve` reports it.
      await expect(executeRemediation(remediation(), t.itemId)).rejects.toBeInstanceOf(AuditUnavailable);
      // The batch the job (and `gatehouse reconcile`) runs before its pass: held, not thrown.
      const outcomes = await executeApprovedRemediations(remediation());
      expect(outcomes).toEqual([
        expect.objectContaining({ state: 'retry', itemId: t.itemId, reason: expect.stringMatching(/^audit_unavailable/) }),
      ]);
      expect(await approvalStatus(t.approvalId)).toBe('approved');
      const report = await pass(); // reads go on
      expect(report.worklist.map((i) => i.id)).toContain(t.itemId);
    } finally {
      await beatAt(new Date());
    }
    // Audit back: the same approval is consumed once and the item resolved.
    expect(await executeApprovedRemediations(remediation())).toEqual([expect.objectContaining({ state: 'resolved', itemId: t.itemId })]);
    expect(await approvalStatus(t.approvalId)).toBe('used');
  });
});

describe('reconciliation: a surplus shipment', () => {
  it('cancel_shipment asks to cancel a shipment no succeeded reship names as its effect, not merely the newest', async () => {
    const orderId = await h.newOrder();
    await ship(orderId, `shp_stray_${orderId}`, -5000); // made outside Gatehouse, first
    const r = await seedStep(h.db, { tool: 'reship_order', orderId, opStatus: 'succeeded', baselineShipments: 1 });
    await ship(orderId, `shp_r_${orderId}`, 0); // the agent's reship, newest
    await evidence(r.key, `shp_r_${orderId}`);

    const report = await pass();
    expect(report.findings.filter((d) => d.finding.orderId === orderId).map((d) => d.finding.subject)).toEqual([
      `order:${orderId}:surplus+1`,
    ]);
    const item = await h.db
      .selectFrom('reconciliation_items')
      .selectAll()
      .where('subject', '=', `order:${orderId}:surplus+1`)
      .executeTakeFirstOrThrow();
    const t = await requestRemediation(remediation(), { itemId: item.id, remediation: 'cancel_shipment', operator: 'ops-gus' });
    const action = await h.db
      .selectFrom('actions')
      .select('arguments')
      .where('operation_key', '=', t.operationKey)
      .executeTakeFirstOrThrow();
    expect(action.arguments).toMatchObject({ shipmentId: `shp_stray_${orderId}` });
  });
});

describe('reconciliation: mail', () => {
  const mail = (orderId: string, id: string, inMs: number) =>
    h.staging
      .insertInto('staging.messages')
      .values({
        message_id: id,
        order_id: orderId,
        tenant: 'quillfeather',
        template: 'refund_issued',
        recipient: 'cust-2@example.test',
        requester: 'rep-ana',
        actor: 'support-agent',
        created_at: new Date(Date.now() + inMs),
      })
      .execute();

  it('an in-flight send is resumed with its own message, not the one a later send recorded as its own', async () => {
    const orderId = await h.newOrder();
    const a = await seedStep(h.db, { tool: 'notify_customer', orderId, opStatus: 'failed_unknown', answered: false });
    await mail(orderId, `msg_a_${orderId}`, 1000); // a's message went out; its answer was lost
    const b = await seedStep(h.db, { tool: 'notify_customer', orderId, opStatus: 'succeeded' });
    await mail(orderId, `msg_b_${orderId}`, 2000);
    await evidence(b.key, `msg_b_${orderId}`);

    const report = await pass();
    expect(report.findings.filter((d) => d.finding.orderId === orderId).map((d) => [d.finding.class, d.finding.ledgerRef])).toEqual([
      ['in_flight_ledger_has_it', `msg_a_${orderId}`],
    ]);
    expect(await op(a.key)).toMatchObject({ status: 'succeeded', evidence_ref: `msg_a_${orderId}` });
  });
});

describe('reconciliation: a refund reversed outside Gatehouse', () => {
  it('replaying it is refused (its key only returns the reversed refund); ratify is still open to the lead', async () => {
    const orderId = await h.newOrder();
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3000, opStatus: 'succeeded' });
    const refundId = await seedRefund(h.db, { key: step.key, orderId, amountCents: 3000 });
    await sql`INSERT INTO staging.refund_reversals (reversal_id, refund_id, idempotency_key, order_id, tenant, amount_cents, reason, requester, actor)
      VALUES (${`rev_${refundId}`}, ${refundId}, ${`console-${refundId}`}, ${orderId}, 'quillfeather', 3000, 'console', 'ops-desk', 'ops-desk')`.execute(
      h.db,
    );
    const report = await pass();
    const found = report.findings.find((d) => d.finding.operationKey === step.key)!;
    expect([found.finding.class, found.finding.detail.reversedBy]).toEqual(['agent_done_ledger_missing', `rev_${refundId}`]);
    await expect(
      requestRemediation(remediation(), { itemId: found.itemId!, remediation: 'replay', operator: 'ops-gus' }),
    ).rejects.toMatchObject({ reason: 'refund_reversed' });
    const t = await requestRemediation(remediation(), { itemId: found.itemId!, remediation: 'ratify', operator: 'ops-gus' });
    expect(t.remediation).toBe('ratify');
  });
});

describe('reconciliation: two passes at once', () => {
  it('the pass that loses the race to resume an in-flight step opens no item for it', async () => {
    const orderId = await h.newOrder();
    const step = await seedStep(h.db, {
      tool: 'issue_refund',
      orderId,
      amountCents: 1500,
      opStatus: 'failed_unknown',
      workflowState: 'needs_reconciliation',
    });
    await seedRefund(h.db, { key: step.key, orderId, amountCents: 1500 });
    // Two passes (the job and `gatehouse reconcile`) read the same picture, then write one after the other.
    const opts = { autoApproveLimitCents: 5000 };
    const mine = (f: Finding) => f.operationKey === step.key;
    const first = classify(await readSnapshot(h.db, h.stagingUrl, opts)).find(mine)!;
    const second = classify(await readSnapshot(h.db, h.stagingUrl, opts)).find(mine)!;
    expect([first.class, second.class]).toEqual(['in_flight_ledger_has_it', 'in_flight_ledger_has_it']);
    const writer = (runId: string) => ({ runId, actor: 'ops-gus', hmacKey: AUDIT_HMAC_KEY });
    expect((await recordFinding(h.db, writer(randomUUID()), first)).disposed.disposition).toBe('resumed');
    const late = await recordFinding(h.db, writer(randomUUID()), second);
    expect(late.rows).toEqual([]);
    const live = await h.db
      .selectFrom('reconciliation_items')
      .select(['class', 'status'])
      .where('operation_key', '=', step.key)
      .where('status', 'in', ['open', 'frozen'])
      .execute();
    expect(live).toEqual([]);
    expect(await op(step.key)).toMatchObject({ status: 'succeeded', fencing_token: '2' });
  });

  it('a pass never closes, as no longer observed, an item another pass opened after this one read its picture', async () => {
    const opts = { autoApproveLimitCents: 5000 };
    const early = await readSnapshot(h.db, h.stagingUrl, opts); // pass A reads first: no difference yet
    const orderId = await h.newOrder();
    const stray = await seedRefund(h.db, { key: `console-${orderId}`, orderId, amountCents: 700 });
    const b = await pass(); // pass B sees the stray refund and opens its item
    const item = b.worklist.find((i) => i.subject === `refund:${stray}`)!;
    expect(item).toMatchObject({ class: 'ledger_entry_without_step', status: 'open' });
    // Pass A now writes what it saw: the stray is not in its picture.
    const runId = randomUUID();
    const observed = new Set(
      classify(early)
        .filter((f) => f.class !== 'matched')
        .map((f) => `${f.class}|${f.subject}`),
    );
    await closeVanished(h.db, { runId, actor: 'ops-gus', hmacKey: AUDIT_HMAC_KEY }, observed, new Date(early.nowMs));
    const after = await h.db.selectFrom('reconciliation_items').select('status').where('id', '=', item.id).executeTakeFirstOrThrow();
    expect(after.status).toBe('open');
  });
});

describe('reconciliation: naming an item', () => {
  it('an id prefix is found whatever its letter case, as the whole id is', async () => {
    const orderId = await h.newOrder();
    await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 2100, opStatus: 'succeeded' });
    const report = await pass();
    const item = report.worklist.find((i) => i.order_id === orderId)!;
    expect((await findItem(h.db, item.id.toUpperCase())).id).toBe(item.id);
    expect((await findItem(h.db, item.id.slice(0, 8).toUpperCase())).id).toBe(item.id);
  });
});

describe('reconciliation: a large ledger', () => {
  it('a payments ledger whose full listing exceeds one read-back body still reconciles, and a stray refund is found', async () => {
    const orderId = await h.newOrder();
    // 6000 refunds nobody's step made (a busy ledger: more than 1 MiB as one listing).
    await sql`INSERT INTO staging.refunds (refund_id, idempotency_key, order_id, tenant, amount_cents, reason, requester, actor, created_at)
      SELECT 're_bulk' || lpad(g::text, 17, '0'), 'bulk-key-' || g, ${orderId}, 'quillfeather', 1, 'bulk', 'rep-ana', 'support-agent',
             now() - interval '1 day' + g * interval '1 millisecond'
        FROM generate_series(1, 6000) g`.execute(h.db);
    const report = await pass();
    expect(report.counts.ledger_entry_without_step).toBeGreaterThanOrEqual(6000);
    expect(report.findings.some((d) => d.finding.subject === 'refund:re_bulk00000000000006000')).toBe(true);
  });
});
