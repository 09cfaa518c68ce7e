import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { startStaging, token, type StagingHarness } from './support/staging.harness.ts';

let h: StagingHarness;
beforeAll(async () => {
  // The ledger's own semantics with reusable tokens; the token binding: test/credentials/delegated-tokens.test.ts.
  h = await startStaging({ tokenBinding: false });
});
afterAll(async () => {
  await h?.stop();
});

const reshipToken = () => token({ aud: 'orders', scope: 'reship:create' });
const mailToken = () => token({ aud: 'mail', scope: 'mail:send' });

describe('order system', () => {
  it('serves seeded orders and 404 for unknown ones', async () => {
    const res = await request(h.baseUrl).get('/orders/O-1001').expect(200);
    expect(res.body).toEqual({ id: 'O-1001', tenant: 'quillfeather', region: 'US', customer: 'cust-1', paid: 12000, status: 'shipped' });
    await request(h.baseUrl).get('/orders/O-0000').expect(404);
  });

  it('creates a new shipment on every call (no idempotency key)', async () => {
    const auth = `Bearer ${await reshipToken()}`;
    const a = await request(h.baseUrl).post('/orders/O-1006/shipments').set('Authorization', auth).send({});
    const b = await request(h.baseUrl).post('/orders/O-1006/shipments').set('Authorization', auth).send({});
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.body.shipmentId).not.toBe(b.body.shipmentId);
    const list = await request(h.baseUrl).get('/orders/O-1006/shipments').expect(200);
    expect(list.body.shipments.map((s: { shipmentId: string }) => s.shipmentId)).toEqual([a.body.shipmentId, b.body.shipmentId]);
  });

  it('refuses a reship of an order that is not shipped (409 order_not_shipped)', async () => {
    const res = await request(h.baseUrl)
      .post('/orders/O-1005/shipments')
      .set('Authorization', `Bearer ${await reshipToken()}`)
      .send({});
    expect(res.status).toBe(409);
    expect(res.body.error.reason).toBe('order_not_shipped');
    expect((await request(h.baseUrl).get('/orders/O-1005/shipments')).body.shipments).toHaveLength(0);
  });

  it('refuses another tenant, a payments token, and no token', async () => {
    const other = await request(h.baseUrl)
      .post('/orders/N-2001/shipments')
      .set('Authorization', `Bearer ${await reshipToken()}`)
      .send({});
    expect(other.status).toBe(403);
    expect(other.body.error.reason).toBe('tenant_mismatch');
    const wrong = await request(h.baseUrl)
      .post('/orders/O-1007/shipments')
      .set('Authorization', `Bearer ${await token()}`)
      .send({});
    expect(wrong.status).toBe(403);
    expect(wrong.body.error.reason).toBe('wrong_audience');
    const none = await request(h.baseUrl).post('/orders/O-1007/shipments').send({});
    expect(none.status).toBe(401);
    expect((await request(h.baseUrl).get('/orders/O-1007/shipments')).body.shipments).toHaveLength(0);
  });
});

describe('mail', () => {
  it('derives the recipient from the order, never from the body', async () => {
    const auth = `Bearer ${await mailToken()}`;
    const res = await request(h.baseUrl).post('/mail/messages').set('Authorization', auth).send({ orderId: 'O-1003', template: 'apology' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ orderId: 'O-1003', template: 'apology', to: 'cust-3@customers.example' });

    const injected = await request(h.baseUrl)
      .post('/mail/messages')
      .set('Authorization', auth)
      .send({ orderId: 'O-1003', template: 'apology', to: 'attacker@evil.example' });
    expect(injected.status).toBe(400);

    const list = await request(h.baseUrl).get('/mail/messages').query({ orderId: 'O-1003' }).expect(200);
    expect(list.body.messages).toHaveLength(1);
    expect(list.body.messages[0].to).toBe('cust-3@customers.example');
  });

  it('sends again on a repeat (no dedupe) and refuses unknown templates', async () => {
    const auth = `Bearer ${await mailToken()}`;
    for (let i = 0; i < 2; i++) {
      await request(h.baseUrl)
        .post('/mail/messages')
        .set('Authorization', auth)
        .send({ orderId: 'O-1008', template: 'refund_issued' })
        .expect(201);
    }
    await request(h.baseUrl)
      .post('/mail/messages')
      .set('Authorization', auth)
      .send({ orderId: 'O-1008', template: 'free_text' })
      .expect(400);
    const list = await request(h.baseUrl).get('/mail/messages').query({ orderId: 'O-1008' }).expect(200);
    expect(list.body.messages).toHaveLength(2);
  });
});
