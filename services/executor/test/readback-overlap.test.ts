import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { processExecution, type ExecutionDeps } from '../src/jobs/executions.processor.ts';
import { resolveByReadBack } from '../src/adapters/index.ts';
import { loadExecutionContext } from '../src/jobs/steps/containment.step.ts';
import { claim, dispatchEffect, readClaimInputs, type Claimed, type ClaimInputs } from '../src/jobs/steps/dispatch.step.ts';
import { startHarness, type Harness } from '../../../test/executor/support/harness.ts';

// A reship has no idempotency key: a lost answer is decided by counting the order's shipments
// against the baseline committed with the claim (ADR 0017). When another reship of the same order
// was dispatched after that baseline was read, one shipment more may be the other's: the outcome
// is unknown (failed_unknown, reconciliation), never the other's shipment taken as this one's
// (docs/decisions/0560-read-back-with-a-rival.md). Each case runs the executor's own steps over
// a real ledger and the staging order system.

let h: Harness;
let deps: ExecutionDeps;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
  deps = h.deps();
});
afterAll(async () => {
  await h?.close();
});

/** Runs the reads and the claim of a seeded reship (the baseline is read here), without dispatching. */
async function claimed(job: Parameters<typeof loadExecutionContext>[1]) {
  const ctx = await loadExecutionContext(h.db, job);
  const inputs = (await readClaimInputs(deps, ctx)) as ClaimInputs;
  expect(inputs.baseline).toMatchObject({ shipments: expect.any(Number), readAt: expect.any(String) });
  const c = await claim(deps, ctx, inputs);
  expect(c.kind).toBe('claimed');
  return { ctx, c: c as Claimed, epoch: inputs.epoch };
}

const shipmentIds = async (orderId: string) => ((await h.shipments(orderId)) as Array<{ shipmentId: string }>).map((s) => s.shipmentId);

describe('reship read-back with another reship of the same order', () => {
  it('another reship dispatched after the baseline: a 5xx with one new shipment is unknown, not the other run’s shipment', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const b = await createAction(h.db, { tool: 'reship_order', orderId });
    const first = await claimed(a.job); // baseline 0 read
    expect(await processExecution(b.job, deps)).toBe('succeeded'); // the other run's shipment lands
    const [theirs] = await shipmentIds(orderId);
    await h.arm({ target: 'orders', mode: 'server_error', times: 1 }); // this run's POST: 503, no effect
    const result = await dispatchEffect(deps, first.ctx, first.c, first.epoch, Date.now());
    expect(result).toMatchObject({ status: 'unknown', reason: expect.stringMatching(/^read_back_ambiguous:concurrent_reship:/) });
    expect(JSON.stringify(result)).toContain(b.operationKey);
    expect(JSON.stringify(result)).not.toContain(theirs);
    expect(await shipmentIds(orderId)).toEqual([theirs]);
  });

  it('a lease expired after dispatch while another reship landed: unknown, never the other run’s shipment', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const b = await createAction(h.db, { tool: 'reship_order', orderId });
    await claimed(a.job); // baseline 0 read, lease granted
    await h.db.updateTable('operations').set({ dispatched_at: new Date() }).where('key', '=', a.operationKey).execute();
    expect(await processExecution(b.job, deps)).toBe('succeeded');
    // a new holder takes over the expired lease: it resolves by read-back, never re-sends
    await h.db
      .updateTable('operations')
      .set({ lease_expires_at: new Date(0) })
      .where('key', '=', a.operationKey)
      .execute();
    const second = await claimed(a.job);
    expect(second.c).toMatchObject({ reclaimed: true, previouslyDispatched: true });
    const result = await dispatchEffect(deps, second.ctx, second.c, second.epoch, Date.now());
    expect(result).toMatchObject({ status: 'unknown' });
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it('a reship finished before the baseline was read is no rival: a lost answer with one new shipment is this run’s', async () => {
    const orderId = await h.newOrder();
    const b = await createAction(h.db, { tool: 'reship_order', orderId });
    expect(await processExecution(b.job, deps)).toBe('succeeded');
    await new Promise((r) => setTimeout(r, 20)); // the other's outcome is written strictly before this baseline
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const first = await claimed(a.job); // baseline 1
    await h.arm({ target: 'orders', mode: 'commit_then_lose_response', times: 1 });
    const result = await dispatchEffect(deps, first.ctx, first.c, first.epoch, Date.now());
    const ids = await shipmentIds(orderId);
    expect(ids).toHaveLength(2);
    expect(result).toMatchObject({ status: 'succeeded', evidenceRef: ids[1] });
  });

  it('a shipment made outside Gatehouse between the baseline and the call: a 5xx with one new shipment is unknown, never that shipment', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const first = await claimed(a.job); // baseline 0 read
    // Someone else (a person in the order system itself, no Gatehouse operation) ships the order.
    await h.staging
      .insertInto('staging.shipments')
      .values({ shipment_id: 'shp_by_someone_else', order_id: orderId, tenant: 'quillfeather', requester: 'ops-desk', actor: 'ops-desk' })
      .execute();
    await new Promise((r) => setTimeout(r, 20)); // that shipment is strictly older than this run's dispatch
    await h.arm({ target: 'orders', mode: 'server_error', times: 1 }); // this run's POST: 503, no effect
    const result = await dispatchEffect(deps, first.ctx, first.c, first.epoch, Date.now());
    expect(result).toMatchObject({ status: 'unknown', reason: expect.stringMatching(/^read_back_ambiguous:/) });
    expect(JSON.stringify(result)).not.toContain('shp_by_someone_else');
    expect(await shipmentIds(orderId)).toEqual(['shp_by_someone_else']);
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it('a listing whose one new shipment has no creation time cannot show it is this call’s: unknown', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const first = await claimed(a.job); // baseline 0 read
    await h.db.updateTable('operations').set({ dispatched_at: new Date() }).where('key', '=', a.operationKey).execute();
    // An order system answering a shipment without `createdAt` (untrusted, ADR 0640).
    const fake = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ shipments: [{ shipmentId: 'shp_without_time', orderId }] }));
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
    try {
      const stagingUrl = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
      const call = { stagingUrl, baseline: first.c.baseline, ledger: h.db, operationKey: a.operationKey };
      expect(await resolveByReadBack(call, orderId, 'ECONNRESET')).toEqual({
        status: 'unknown',
        reason: 'read_back_ambiguous:shipment_time_unreadable',
        attempts: 1,
      });
    } finally {
      await closeServer(fake);
    }
  });

  it('no other reship: a 5xx with no new shipment is safe to repeat', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    const first = await claimed(a.job);
    await h.arm({ target: 'orders', mode: 'server_error', times: 1 });
    expect(await dispatchEffect(deps, first.ctx, first.c, first.epoch, Date.now())).toMatchObject({ status: 'retry_safe' });
    expect(await shipmentIds(orderId)).toEqual([]);
  });
});
