import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction, OVERRIDE_RUN_RELEASE, recordWorkflowEvent } from '@gatehouse/ledger';
import { overrideDigest, requestOverride } from '@gatehouse/operations';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// A release override's run (ADR 0230) is the platform's: its requesting operator's tenant only
// owns the row. Its events went to that tenant's webhook receivers — a release, a kind of override
// and its reason, sent to one customer's systems (found by helpers 120 and 123). Its events are
// still stored; no tenant's webhook is sent them (ADR 0769). A tenant's own run still is.

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  await t.db
    .insertInto('webhook_endpoints')
    .values({ tenant: 'quillfeather', url: 'http://127.0.0.1:9/hook', secret: 'whsec_test', created_by: 'test' })
    .execute();
});
afterAll(async () => {
  await t?.drop();
});

/** Writes the next event of `workflowId` (as every transition does); returns its events and webhook deliveries after. */
async function moveAndRead(workflowId: string) {
  await inTransaction(t.db, (trx) => recordWorkflowEvent(trx, workflowId, 'awaiting_approval'));
  const events = await t.db.selectFrom('workflow_events').select('seq').where('workflow_id', '=', workflowId).execute();
  const deliveries = await t.db.selectFrom('webhook_deliveries').select('tenant').where('workflow_id', '=', workflowId).execute();
  return { events: events.length, deliveries: deliveries.length };
}

describe('a release override run’s events reach no tenant’s webhook (ADR 0769)', () => {
  it('the override run’s event is stored with no delivery; a tenant run’s event has one per endpoint of its tenant', async () => {
    const items = ['R7.boundary'];
    const ticket = await requestOverride(t.db, {
      release: 'rel-2',
      kind: 'force_gate',
      items,
      manifest: null,
      digest: overrideDigest('force_gate', 'rel-2', items, null),
      summary: 'force rel-2 past its gate',
      reason: 'test',
      operator: 'ops-gus',
      hmacKey: 'test-hmac-key',
    });
    const run = await t.db
      .selectFrom('workflows')
      .select(['tenant', 'release_id'])
      .where('id', '=', ticket.workflowId)
      .executeTakeFirstOrThrow();
    expect(run).toEqual({ tenant: 'quillfeather', release_id: OVERRIDE_RUN_RELEASE });
    expect(await moveAndRead(ticket.workflowId)).toEqual({ events: 1, deliveries: 0 });

    const tenantRun = await createAction(t.db, { orderId: 'O-1001', amountCents: 9000, pendingApproval: {} });
    expect(await moveAndRead(tenantRun.workflowId)).toEqual({ events: 1, deliveries: 1 });
  });
});
