import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { newKey, startStaging, token, type StagingHarness } from './support/staging.harness.ts';

// Compensations (docs/product/invariants.md#containment, docs/product/reconciliation.md#remediations): `reverse_refund` and `cancel_shipment` are
// idempotent by key, verify the delegated token like every effect route, and are visible in
// the read-back endpoints reconciliation uses.

let h: StagingHarness;
beforeAll(async () => {
  // The ledger's own semantics with reusable tokens; the token binding: test/credentials/delegated-tokens.test.ts.
  h = await startStaging({ tokenBinding: false });
});
afterAll(async () => {
  await h?.stop();
});

const reverseToken = (o: Parameters<typeof token>[0] = {}) => token({ scope: 'refund:reverse', sub: 'lead-eli', ...o });
const cancelToken = (o: Parameters<typeof token>[0] = {}) => token({ aud: 'orders', scope: 'shipment:cancel', sub: 'lead-eli', ...o });

async function refund(orderId: string, amountCents: number): Promise<{ refundId: string; idempotencyKey: string }> {
  const key = newKey();
  const res = await request(h.baseUrl)
    .post('/ledger/refunds')
    .set('Idempotency-Key', key)
    .set('Authorization', `Bearer ${await token()}`)
    .send({ orderId, amountCents, reason: 'damaged item' });
  expect(res.status).toBe(201);
  return res.body;
}

async function reverse(refundId: string, key: string, auth?: string, fence?: number) {
  const req = request(h.baseUrl)
    .post(`/ledger/refunds/${refundId}/reversals`)
    .set('Idempotency-Key', key)
    .set('Authorization', `Bearer ${auth ?? (await reverseToken())}`);
  if (fence !== undefined) req.set('X-Fencing-Token', String(fence));
  return req.send({ reason: 'reconciliation' });
}

async function reversals(orderId?: string): Promise<Array<{ refundId: string; idempotencyKey: string; amountCents: number }>> {
  return (
    await request(h.baseUrl)
      .get('/ledger/reversals')
      .query(orderId ? { orderId } : {})
      .expect(200)
  ).body.reversals;
}

async function shipment(orderId: string): Promise<string> {
  const res = await request(h.baseUrl)
    .post(`/orders/${orderId}/shipments`)
    .set('Authorization', `Bearer ${await token({ aud: 'orders', scope: 'reship:create' })}`)
    .send({});
  expect(res.status).toBe(201);
  return res.body.shipmentId;
}

async function cancel(orderId: string, shipmentId: string, key: string, auth?: string) {
  return request(h.baseUrl)
    .post(`/orders/${orderId}/shipments/${shipmentId}/cancel`)
    .set('Idempotency-Key', key)
    .set('Authorization', `Bearer ${auth ?? (await cancelToken())}`)
    .send({});
}

describe('payments ledger read-back for reconciliation', () => {
  it('lists every refund without orderId, and a tenant’s with ?tenant=', async () => {
    const a = await refund('O-1001', 1000);
    const b = await refund('O-1006', 2000);
    const all = (await request(h.baseUrl).get('/ledger/refunds').expect(200)).body.refunds as Array<{ refundId: string }>;
    expect(all.map((r) => r.refundId)).toEqual(expect.arrayContaining([a.refundId, b.refundId]));
    const none = (await request(h.baseUrl).get('/ledger/refunds').query({ tenant: 'northwind' }).expect(200)).body.refunds;
    expect(none).toEqual([]);
  });
});

describe('reverse_refund', () => {
  it('reverses the whole refund once (201), replays the same key (200), refuses another key (409 already_reversed)', async () => {
    const r = await refund('O-1002', 7000);
    const key = `recon_${newKey()}`;
    const first = await reverse(r.refundId, key);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ refundId: r.refundId, orderId: 'O-1002', amountCents: 7000, idempotencyKey: key });
    const again = await reverse(r.refundId, key);
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    const other = await reverse(r.refundId, `recon_${newKey()}`);
    expect(other.status).toBe(409);
    expect(other.body.error.reason).toBe('already_reversed');
    expect((await reversals('O-1002')).filter((x) => x.refundId === r.refundId)).toHaveLength(1);
  });

  it('refuses a key that reversed another refund (409 idempotency_key_reuse)', async () => {
    const a = await refund('O-1004', 1500);
    const b = await refund('O-1004', 1600);
    const key = `recon_${newKey()}`;
    expect((await reverse(a.refundId, key)).status).toBe(201);
    const res = await reverse(b.refundId, key);
    expect(res.status).toBe(409);
    expect(res.body.error.reason).toBe('idempotency_key_reuse');
    expect((await reversals('O-1004')).map((x) => x.refundId)).toEqual([a.refundId]);
  });

  it('verifies the delegation: no token 401, the refund scope 403, another tenant 403 — none reverses', async () => {
    const r = await refund('O-1007', 2500);
    const noToken = await request(h.baseUrl)
      .post(`/ledger/refunds/${r.refundId}/reversals`)
      .set('Idempotency-Key', newKey())
      .send({ reason: 'x' });
    expect(noToken.status).toBe(401);
    const wrongScope = await reverse(r.refundId, newKey(), await token());
    expect(wrongScope.status).toBe(403);
    expect(wrongScope.body.error.reason).toBe('wrong_scope');
    const otherTenant = await reverse(r.refundId, newKey(), await reverseToken({ tenant: 'northwind', sub: 'lead-jon' }));
    expect(otherTenant.status).toBe(403);
    expect(otherTenant.body.error.reason).toBe('tenant_mismatch');
    expect(await reversals('O-1007')).toEqual([]);
  });

  it('refuses a stale fencing token for its key (409 stale_fencing_token)', async () => {
    const r = await refund('O-1007', 2600);
    const key = newKey();
    expect((await reverse(r.refundId, key, undefined, 5)).status).toBe(201);
    const stale = await reverse(r.refundId, key, undefined, 4);
    expect(stale.status).toBe(409);
    expect(stale.body.error.reason).toBe('stale_fencing_token');
  });

  it('answers 404 for an unknown refund', async () => {
    const res = await reverse('re_000000000000000000000000', newKey());
    expect(res.status).toBe(404);
    expect(res.body.error.reason).toBe('refund_not_found');
  });
});

describe('cancel_shipment', () => {
  it('cancels once (201), replays the same key (200), refuses another key (409); the listing keeps it with cancelledAt', async () => {
    const s1 = await shipment('O-1008');
    const s2 = await shipment('O-1008');
    const key = `recon_${newKey()}`;
    const first = await cancel('O-1008', s2, key);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ shipmentId: s2, orderId: 'O-1008', cancelledAt: expect.any(String) });
    const again = await cancel('O-1008', s2, key);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    const other = await cancel('O-1008', s2, `recon_${newKey()}`);
    expect(other.status).toBe(409);
    expect(other.body.error.reason).toBe('already_cancelled');
    const reuse = await cancel('O-1008', s1, key);
    expect(reuse.status).toBe(409);
    expect(reuse.body.error.reason).toBe('idempotency_key_reuse');
    const list = (await request(h.baseUrl).get('/orders/O-1008/shipments').expect(200)).body.shipments;
    expect(list).toEqual([
      expect.objectContaining({ shipmentId: s1, cancelledAt: null }),
      expect.objectContaining({ shipmentId: s2, cancelledAt: first.body.cancelledAt }),
    ]);
  });

  it('verifies the delegation and the order: reship scope 403, another tenant 403, a shipment of another order 404', async () => {
    const s = await shipment('O-0812');
    const wrongScope = await cancel('O-0812', s, newKey(), await token({ aud: 'orders', scope: 'reship:create' }));
    expect(wrongScope.status).toBe(403);
    expect(wrongScope.body.error.reason).toBe('wrong_scope');
    const otherTenant = await cancel('O-0812', s, newKey(), await cancelToken({ tenant: 'northwind' }));
    expect(otherTenant.status).toBe(403);
    const otherOrder = await cancel('O-1001', s, newKey());
    expect(otherOrder.status).toBe(404);
    expect(otherOrder.body.error.reason).toBe('shipment_not_found');
    const list = (await request(h.baseUrl).get('/orders/O-0812/shipments').expect(200)).body.shipments;
    expect(list).toEqual([expect.objectContaining({ shipmentId: s, cancelledAt: null })]);
  });
});

describe('change service read-back', () => {
  it('lists every scheduled operation', async () => {
    const key = newKey('chg');
    const res = await request(h.baseUrl)
      .post('/changes/operations')
      .set('Idempotency-Key', key)
      .set('Authorization', `Bearer ${await token({ aud: 'changes', scope: 'change:schedule', sub: 'eng-lou' })}`)
      .send({ planId: 'plan_aaaaaaaaaaaaaaaa', changeId: 'CHG-101', window: 'manual-window', note: null });
    expect(res.status).toBe(201);
    const list = (await request(h.baseUrl).get('/changes/operations').expect(200)).body.operations;
    expect(list).toEqual([expect.objectContaining({ operationKey: key, changeId: 'CHG-101' })]);
  });
});
