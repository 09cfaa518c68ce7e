import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { answerJson, startInterceptingProxy, type InterceptingProxy } from '@gatehouse/test-harness';
import { processExecution, type ExecutionDeps } from '../src/jobs/executions.processor.ts';
import { startHarness, type Harness } from '../../../test/executor/support/harness.ts';

// A reship has no idempotency key: a lost answer is decided by reading the order's shipments back
// against the baseline count committed with the claim (ADR 0017). When the baseline's own listing
// fails, nothing could decide a lost answer afterwards, so the reship is not sent: the step is held
// as an outage of the order system and sent once a baseline is read
// (docs/decisions/0665-no-reship-without-a-baseline.md). The executor's steps run over a real
// ledger and the staging order system, behind a proxy that fails the shipments listing on demand.

let h: Harness;
let deps: ExecutionDeps;
let proxy: InterceptingProxy;
/** How many `GET /orders/:id/shipments` the proxy still answers 503 (the rest is passed through). */
let failListings = 0;
/** Bodies the proxy answers 200 to the next `GET /orders/:id/shipments`, one each, before passing through. */
const listingBodies: unknown[] = [];

beforeAll(async () => {
  h = await startHarness();
  // A system of record that loses an answer resets the connection: so does the proxy.
  proxy = await startInterceptingProxy(h.stagingUrl, (req, res) => {
    const listing = req.method === 'GET' && /^\/orders\/[^/]+\/shipments$/.test(req.url ?? '');
    if (listing && failListings > 0) {
      failListings--;
      return answerJson(res, 503, { error: { reason: 'server_error', message: 'listing unavailable (test proxy)' } });
    }
    return listing && listingBodies.length > 0 ? answerJson(res, 200, listingBodies.shift()) : false;
  });
  deps = h.deps({ stagingUrl: proxy.url });
});
afterAll(async () => {
  await proxy?.close();
  await h?.close();
});

const posts = async (orderId: string) => (await h.requests(orderId)).filter((r) => r.method === 'POST').length;

describe('reship whose baseline cannot be read', () => {
  it('is held, nothing sent; once the listing answers, a lost answer is decided by read-back: one shipment, succeeded', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    await h.arm({ target: 'orders', mode: 'commit_then_lose_response', times: 1 });
    failListings = 1;
    await expect(processExecution(a.job, deps)).rejects.toMatchObject({
      dependency: 'system_of_record',
      message: expect.stringMatching(/shipments/),
    });
    expect(await posts(orderId)).toBe(0);
    expect(await h.shipments(orderId)).toHaveLength(0);
    const action = await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
    expect(action.status).toBe('approved');

    // The listing answers again: baseline 0, the shipment is created and its answer lost, the
    // read-back finds exactly one more: this operation's.
    expect(await processExecution(a.job, deps)).toBe('succeeded');
    expect(await h.shipments(orderId)).toHaveLength(1);
    const op = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op.status).toBe('succeeded');
    expect(op.baseline).toMatchObject({ shipments: 0 });
  });

  it('a listing that is not a list of shipments is no baseline: an earlier shipment is never taken for this reship', async () => {
    const orderId = await h.newOrder();
    // The order already has a shipment, from an hour ago (no reship of this ledger: no rival).
    await h.staging
      .insertInto('staging.shipments')
      .values({
        shipment_id: `shp-earlier-${orderId}`,
        order_id: orderId,
        tenant: 'quillfeather',
        requester: 'rep-ana',
        actor: 'support-agent',
        created_at: new Date(Date.now() - 3_600_000),
      })
      .execute();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    listingBodies.push({}); // a 200 without the list
    await h.arm({ target: 'orders', mode: 'server_error', times: 1 }); // the POST: 503, no shipment made
    await expect(processExecution(a.job, deps)).rejects.toMatchObject({
      dependency: 'system_of_record',
      message: expect.stringMatching(/shipments/),
    });
    expect(await posts(orderId)).toBe(0);
    // The listing answers: baseline 1. The 503 is read back: still 1, safe to repeat, nothing recorded as done.
    await expect(processExecution(a.job, deps)).rejects.toMatchObject({ name: 'SafeToRepeat' });
    expect(await h.shipments(orderId)).toHaveLength(1);
    // Repeated: the shipment is made.
    expect(await processExecution(a.job, deps)).toBe('succeeded');
    expect(await h.shipments(orderId)).toHaveLength(2);
    const op = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op.evidence_ref).not.toBe(`shp-earlier-${orderId}`);
  });
});
