import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { newKey, startStaging, token, type StagingHarness } from './support/staging.harness.ts';

let h: StagingHarness;
beforeAll(async () => {
  // The ledger's own semantics with reusable tokens; the token binding: test/credentials/delegated-tokens.test.ts.
  h = await startStaging({ tokenBinding: false });
});
afterAll(async () => {
  await h?.stop();
});

describe('request log', () => {
  it('records accepted and rejected effect requests, filterable by order and target', async () => {
    await request(h.baseUrl).delete('/requests').expect(200);
    const key = newKey();
    await request(h.baseUrl)
      .post('/ledger/refunds')
      .set('Authorization', `Bearer ${await token({ ceiling: 100 })}`)
      .set('Idempotency-Key', key)
      .set('X-Fencing-Token', '7')
      .send({ orderId: 'O-1002', amountCents: 500, reason: 'too much' })
      .expect(403);
    await request(h.baseUrl)
      .post('/ledger/refunds')
      .set('Authorization', `Bearer ${await token()}`)
      .set('Idempotency-Key', key)
      .set('X-Fencing-Token', '7')
      .send({ orderId: 'O-1002', amountCents: 500, reason: 'ok' })
      .expect(201);
    await request(h.baseUrl).post('/orders/O-1002/shipments').send({}).expect(401);

    const all = await request(h.baseUrl).get('/requests').query({ orderId: 'O-1002' }).expect(200);
    expect(all.body.requests).toEqual([
      expect.objectContaining({
        target: 'payments',
        method: 'POST',
        path: '/ledger/refunds',
        idempotencyKey: key,
        fencingToken: 7,
        status: 403,
        reason: 'ceiling_exceeded',
      }),
      expect.objectContaining({ target: 'payments', status: 201, reason: null }),
      expect.objectContaining({ target: 'orders', path: '/orders/O-1002/shipments', status: 401, reason: 'missing_token' }),
    ]);
    const payments = await request(h.baseUrl).get('/requests').query({ orderId: 'O-1002', target: 'payments' }).expect(200);
    expect(payments.body.requests).toHaveLength(2);
  });

  it('shows zero calls for an order nobody touched, and clears', async () => {
    expect((await request(h.baseUrl).get('/requests').query({ orderId: 'O-0812' })).body.requests).toEqual([]);
    const cleared = await request(h.baseUrl).delete('/requests').expect(200);
    expect(cleared.body.cleared).toBeGreaterThan(0);
    expect((await request(h.baseUrl).get('/requests')).body.requests).toEqual([]);
  });

  it('reads back nothing for read endpoints (they are not effects)', async () => {
    await request(h.baseUrl).get('/orders/O-1001').expect(200);
    await request(h.baseUrl).get('/ledger/refunds').query({ orderId: 'O-1001' }).expect(200);
    expect((await request(h.baseUrl).get('/requests')).body.requests).toEqual([]);
  });

  it('serves health and readiness', async () => {
    await request(h.baseUrl).get('/healthz').expect(200);
    expect((await request(h.baseUrl).get('/readyz').expect(200)).body).toMatchObject({ ready: true });
  });
});
