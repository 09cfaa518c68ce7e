import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { freePort } from '@gatehouse/test-harness';
import { startHarness, type Harness } from './support/harness.ts';

// The executor re-reads the order before it claims an approved refund. An order system that
// answers something that is not an order (ADR 0640: `paid` as a string) has not answered: the
// step is held like an outage of the system of record, nothing claimed or sent, and past the
// outage ceiling the call is refused with the run's stop (`dependency_unavailable`), so the run
// never waits on a job that keeps failing.

let h: Harness;
let orders: Server;
let ordersUrl: string;
let htmlOrders: Server;
let htmlOrdersUrl: string;

beforeAll(async () => {
  h = await startHarness();
  // Answers every read with an order whose amount paid is text; nothing else is served.
  orders = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    const id = decodeURIComponent(String(req.url).split('/')[2] ?? '');
    res.end(JSON.stringify({ id, tenant: 'quillfeather', region: 'US', customer: 'cust-1', paid: '500.00', status: 'shipped' }));
  });
  await new Promise<void>((r) => orders.listen(0, '127.0.0.1', r));
  ordersUrl = `http://127.0.0.1:${(orders.address() as AddressInfo).port}`;
  // Answers every read 200 with a page, not JSON (a proxy's or a maintenance page).
  htmlOrders = createServer((_req, res) => {
    res.setHeader('content-type', 'text/html');
    res.end('<html><body>Service temporarily in maintenance</body></html>');
  });
  await new Promise<void>((r) => htmlOrders.listen(0, '127.0.0.1', r));
  htmlOrdersUrl = `http://127.0.0.1:${(htmlOrders.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((r) => orders?.close(r));
  await new Promise((r) => htmlOrders?.close(r));
  await h?.close();
});

const state = async (a: { actionId: string; approvalId: string | null; operationKey: string }) => ({
  action: (await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow()).status,
  approval: (await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow()).status,
  operation: (await h.db.selectFrom('operations').select('status').where('key', '=', a.operationKey).executeTakeFirst())?.status ?? null,
});

describe('executor: a malformed order record at the re-evaluation', () => {
  it('held as the system of record being unavailable: nothing claimed, consumed or sent', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6100 });
    await expect(processExecution(a.job, h.deps({ stagingUrl: ordersUrl }))).rejects.toMatchObject({
      name: 'DependencyUnavailable',
      dependency: 'system_of_record',
      message: expect.stringContaining('order system answered a malformed record: paid: '),
    });
    expect(await state(a)).toEqual({ action: 'approved', approval: 'approved', operation: null });
    expect(await h.requests(orderId)).toEqual([]);
  });

  it('past the outage ceiling: refused with the stop of its run (dependency_unavailable), nothing sent, the approval unused', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6200 });
    const job = { ...a.job, outage: { dependency: 'system_of_record' as const, sinceMs: Date.now() - 16 * 60_000 } };
    expect(await processExecution(job, h.deps({ stagingUrl: ordersUrl }))).toBe('refused:dependency_unavailable');
    expect(await state(a)).toMatchObject({ approval: 'approved', operation: null });
    expect(await h.requests(orderId)).toEqual([]);
  });

  it('an order system that refuses the connection is the same outage: held, and past the ceiling refused with the stop of its run', async () => {
    const nobody = `http://127.0.0.1:${await freePort()}`;
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6300 });
    await expect(processExecution(a.job, h.deps({ stagingUrl: nobody }))).rejects.toMatchObject({
      name: 'DependencyUnavailable',
      dependency: 'system_of_record',
      message: expect.stringContaining('order system: no answer'),
    });
    const job = { ...a.job, outage: { dependency: 'system_of_record' as const, sinceMs: Date.now() - 16 * 60_000 } };
    expect(await processExecution(job, h.deps({ stagingUrl: nobody }))).toBe('refused:dependency_unavailable');
    expect(await state(a)).toMatchObject({ approval: 'approved', operation: null });
  });

  it('an order system answering 200 with a body that is not JSON is the same: held, nothing claimed or sent (it was dead-lettered)', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6400 });
    await expect(processExecution(a.job, h.deps({ stagingUrl: htmlOrdersUrl }))).rejects.toMatchObject({
      name: 'DependencyUnavailable',
      dependency: 'system_of_record',
      message: expect.stringContaining('order system answered a body that is not JSON'),
    });
    expect(await state(a)).toEqual({ action: 'approved', approval: 'approved', operation: null });
    expect(await h.requests(orderId)).toEqual([]);
  });
});
