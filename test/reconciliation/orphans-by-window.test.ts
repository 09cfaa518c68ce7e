import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import {
  cli,
  fc,
  fixtures,
  mails,
  msg,
  settled,
  shipments,
  startHuntStack,
  submit,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// ADR 0775 (not built yet, item 2) and ADR 0791: after a ledger promote that lost commits, a reship
// and an email that reached the order system and the mail service have no step in the ledger.
// Reconciliation read the shipments of the orders world.json or the ledger knows, and mail only of
// orders with a send in flight, so neither was listed (the orphan refunds were). The pass now also
// reads the order system's shipments and the mail service's messages by time window: an orphan
// shipment is a `shipment_count_mismatch`, an orphan message a `ledger_entry_without_step`, each
// with its owner. Orders here are made in the order system only (not in world.json), as the
// drill's were.

let s: HuntStack;

beforeAll(async () => {
  // No scheduled pass during the test: every pass is the CLI's, on demand.
  s = await startHuntStack({ RECONCILE_INTERVAL_MS: '3600000' });
});
afterAll(async () => {
  await s?.close();
});

interface Item {
  class: string;
  subject: string;
  owner: string;
  tool: string | null;
  order_id: string | null;
  tenant: string | null;
  ledger_ref: string | null;
}

/** `gatehouse reconcile --json`: the live worklist after one pass. */
async function reconcile(): Promise<Item[]> {
  const out = await cli(s, ['reconcile', '--json']);
  const start = out.indexOf('{');
  return (JSON.parse(out.slice(start)) as { worklist: Item[] }).worklist;
}

let serial = 1000 + Math.floor(Math.random() * 8000);

/** An order that only the order system knows (world.json does not), shipped, paid 200.00 (a reship needs no approval). */
async function newOrder(): Promise<string> {
  const id = `W-${serial++}`; // the order id form the tools accept: one letter, four digits
  await sql`insert into staging.orders (id, tenant, region, customer, paid_cents, status)
    values (${id}, 'quillfeather', 'US', 'cust-2', 20000, 'shipped')`.execute(s.db.db);
  return id;
}

/** A run through the product (intake, gateway, executor) that reships `orderId` and emails its customer; returns its workflow id. */
async function reshipAndEmail(orderId: string): Promise<string> {
  const ticketId = `T-orphan-${randomUUID().slice(0, 8)}`;
  await fixtures(s, ticketId, [
    fc(['lookup_order', { orderId }]),
    fc(['reship_order', { orderId }], ['notify_customer', { orderId, template: 'reship_created' }]),
    msg(),
  ]);
  const { token, workflowId } = await submit(s, 'rep-ana', ticketId, `Please reship order ${orderId} and tell the customer.`);
  const v = await waitFor(s, token, workflowId, settled);
  expect(v.state).toBe('completed');
  expect(await shipments(s, orderId)).toHaveLength(1);
  expect(await mails(s, orderId)).toHaveLength(1);
  return workflowId;
}

/**
 * What a promote that lost the run's commits leaves: no row of the workflow in the ledger (every
 * table that names it), while its effects stand in the systems of record. The audit chain is left
 * alone (its truncation is the audit service's signal, not this test's subject).
 */
async function forgetWorkflow(workflowId: string): Promise<void> {
  await s.db.db.transaction().execute(async (trx) => {
    await sql`set local session_replication_role = replica`.execute(trx);
    const { rows } = await sql<{ table_name: string }>`select table_name from information_schema.columns
      where table_schema = 'public' and column_name = 'workflow_id' and table_name not like 'audit%'`.execute(trx);
    for (const { table_name } of rows) await sql`delete from ${sql.table(table_name)} where workflow_id = ${workflowId}`.execute(trx);
    await sql`delete from workflows where id = ${workflowId}`.execute(trx);
  });
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from operations where workflow_id = ${workflowId}`.execute(s.db.db);
  expect(rows[0]!.n).toBe(0);
}

describe('reconciliation reads shipments and mail by time window', () => {
  it('nothing orphan: a reship and an email whose run the ledger keeps list nothing', async () => {
    const orderId = await newOrder();
    await reshipAndEmail(orderId);
    const live = (await reconcile()).filter((i) => i.order_id === orderId);
    expect(live).toEqual([]);
  });

  it('a reship and an email whose run the ledger lost are listed, each with its owner', async () => {
    const orderId = await newOrder();
    const workflowId = await reshipAndEmail(orderId);
    const [shipment] = (await shipments(s, orderId)) as Array<{ shipmentId: string }>;
    const [message] = (await mails(s, orderId)) as Array<{ messageId: string }>;
    await forgetWorkflow(workflowId);

    const live = (await reconcile()).filter((i) => i.order_id === orderId);
    expect(live).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          class: 'shipment_count_mismatch',
          subject: `order:${orderId}:surplus+1`,
          owner: 'support-lead',
          tool: 'reship_order',
          tenant: 'quillfeather',
          ledger_ref: shipment!.shipmentId,
        }),
        expect.objectContaining({
          class: 'ledger_entry_without_step',
          subject: `message:${message!.messageId}`,
          owner: 'support-lead',
          tool: 'notify_customer',
          tenant: 'quillfeather',
          ledger_ref: message!.messageId,
        }),
      ]),
    );
    expect(live).toHaveLength(2);
    // A second pass duplicates nothing and keeps both open.
    expect((await reconcile()).filter((i) => i.order_id === orderId)).toHaveLength(2);
  });

  it('a shipment of an order neither the world nor the order system knows is listed', async () => {
    const orderId = `X-${randomUUID().slice(0, 8)}`;
    await sql`insert into staging.shipments (shipment_id, order_id, tenant, requester, actor)
      values (${`shp_${orderId}`}, ${orderId}, 'quillfeather', 'someone', 'someone')`.execute(s.db.db);
    const live = (await reconcile()).filter((i) => i.order_id === orderId);
    expect(live).toEqual([
      expect.objectContaining({
        class: 'shipment_count_mismatch',
        subject: `order:${orderId}:surplus+1`,
        owner: 'support-lead',
        tenant: 'quillfeather',
        ledger_ref: `shp_${orderId}`,
      }),
    ]);
  });
});
