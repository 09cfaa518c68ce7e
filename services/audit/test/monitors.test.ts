import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createAction, createTestDatabase, type SeededAction, type TestDatabase } from '@gatehouse/testing';
import { evaluateMonitors } from '../src/domain/monitors.ts';

// Invariant monitors are standing queries over the records: they must fire on the outcome of a
// bad release (e.g. a units mistake that let a 9900 refund through without approval), whatever
// code path produced it, and stay silent when every invariant holds.

let t: TestDatabase;
const cfg = { autoApproveLimitCents: 5000, maxFailedUnknownPerHour: 2 };

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});
beforeEach(async () => {
  await sql`TRUNCATE operations, approvals, actions, proposals, budgets, workflows, audit_outbox, reconciliation_items CASCADE`.execute(
    t.db,
  );
});

/** Records the effect of a seeded action as the executor would: an operation in `status`. */
async function effect(a: SeededAction, status: 'succeeded' | 'failed_unknown' = 'succeeded', approvalUsed = true): Promise<void> {
  const row = await t.db
    .selectFrom('actions')
    .select(['digest', 'tool', 'release_id'])
    .where('id', '=', a.actionId)
    .executeTakeFirstOrThrow();
  await t.db
    .insertInto('operations')
    .values({
      key: a.operationKey,
      workflow_id: a.workflowId,
      action_id: a.actionId,
      action_digest: row.digest,
      tool: row.tool,
      status,
      fencing_token: 1,
      release_id: row.release_id,
    })
    .execute();
  await t.db.updateTable('actions').set({ status }).where('id', '=', a.actionId).execute();
  if (a.approvalId && approvalUsed)
    await t.db.updateTable('approvals').set({ status: 'used', used_at: new Date() }).where('id', '=', a.approvalId).execute();
}

const fired = async () => (await evaluateMonitors(t.db, cfg)).map((x) => x.monitor).sort();

describe('invariant monitors', () => {
  it('stay silent when every effect that needed an approval consumed one', async () => {
    await effect(await createAction(t.db, { orderId: 'O-1002', amountCents: 12000 }));
    await effect(await createAction(t.db, { orderId: 'O-1001', amountCents: 3000 }));
    expect(await fired()).toEqual([]);
  });

  it('a 9900 refund let through without approval (units mistake) trips the outcome monitors', async () => {
    const bad = await createAction(t.db, { orderId: 'O-1006', amountCents: 9900, decision: 'ALLOW', approved: false });
    await effect(bad);
    const alerts = await evaluateMonitors(t.db, cfg);
    const over = alerts.find((a) => a.monitor === 'refund_over_auto_limit_without_approval');
    expect(over?.examples).toEqual([bad.operationKey]);
    expect(alerts.map((a) => a.monitor)).toContain('approvals_stopped_while_refunds_continue');
  });

  it('split refunds cannot hide: the cumulative total over the auto limit without approval fires', async () => {
    const first = await createAction(t.db, { orderId: 'O-1004', amountCents: 4900, decision: 'ALLOW', approved: false });
    await effect(first);
    const second = await createAction(t.db, { orderId: 'O-1004', amountCents: 4900, decision: 'ALLOW', approved: false });
    await effect(second);
    const over = (await evaluateMonitors(t.db, cfg)).find((a) => a.monitor === 'refund_over_auto_limit_without_approval');
    expect(over?.examples).toEqual([second.operationKey]);
  });

  it('a refund a lead resolved through reconciliation (ratified or reversed) is explained: the monitors stop naming it', async () => {
    const bad = await createAction(t.db, { orderId: 'O-1006', amountCents: 9900, decision: 'ALLOW', approved: false });
    await effect(bad);
    const item = {
      id: crypto.randomUUID(),
      run_id: crypto.randomUUID(),
      class: 'refund_over_limit_without_approval' as const,
      owner: 'support-lead',
      subject: `refund:re_${bad.actionId}`,
      operation_key: bad.operationKey,
      detail: '{}',
    };
    await t.db
      .insertInto('reconciliation_items')
      .values({ ...item, status: 'open' })
      .execute();
    expect(await fired()).toContain('refund_over_auto_limit_without_approval'); // open: still a violation
    await t.db.updateTable('reconciliation_items').set({ status: 'resolved', resolved_by: 'lead-eli' }).where('id', '=', item.id).execute();
    expect(await fired()).not.toContain('refund_over_auto_limit_without_approval');
  });

  it('an effect whose policy required approval, without a used approval, fires', async () => {
    const a = await createAction(t.db, { orderId: 'O-1002', tool: 'reship_order' });
    await effect(a, 'succeeded', false);
    expect(await fired()).toContain('effect_without_required_approval');
  });

  it('failed_unknown above the hourly threshold and any idempotency conflict fire', async () => {
    for (let i = 0; i < 3; i++) await effect(await createAction(t.db, { orderId: 'O-1001', amountCents: 1000 }), 'failed_unknown');
    await t.db
      .insertInto('audit_outbox')
      .values({
        event: JSON.stringify({
          type: 'operation.failed',
          outcome: 'idempotency_conflict',
          operationKeyHash: 'abc',
          service: 'executor',
          runId: null,
          atMs: Date.now(),
        }),
      })
      .execute();
    expect(await fired()).toEqual(expect.arrayContaining(['failed_unknown_rising', 'idempotency_conflict']));
  });

  it('an edited audit event is an audit gap', async () => {
    await t.db
      .insertInto('audit_log')
      .values({ seq: '1', outbox_id: '1', event: JSON.stringify({ type: 'run.started' }), prev_hash: '0'.repeat(64), hash: 'f'.repeat(64) })
      .execute();
    const gap = (await evaluateMonitors(t.db, cfg)).find((a) => a.monitor === 'audit_gap');
    expect(gap?.examples[0]).toMatch(/^seq 1/);
  });
});
