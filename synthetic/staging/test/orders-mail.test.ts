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

describe('read-back by time window (ADR 0791)', () => {
  it('lists the shipments and messages of any order since a time, page by page, with their tenant', async () => {
    const since = new Date(Date.now() - 1000).toISOString();
    const ship = await request(h.baseUrl)
      .post('/orders/O-1004/shipments')
      .set('Authorization', `Bearer ${await reshipToken()}`)
      .send({});
    const sent = await request(h.baseUrl)
      .post('/mail/messages')
      .set('Authorization', `Bearer ${await mailToken()}`)
      .send({ orderId: 'O-1004', template: 'reship_created' });
    expect([ship.status, sent.status]).toEqual([201, 201]);
    // A shipment of an order the order system does not know (made outside it): listed all the same.
    await h.db
      .insertInto('staging.shipments')
      .values({ shipment_id: 'shp_window_stray', order_id: 'X-0001', tenant: 'quillfeather', requester: 'x', actor: 'x' })
      .execute();

    const all = await request(h.baseUrl).get('/shipments').query({ since }).expect(200);
    expect(all.body.next).toBeUndefined();
    expect(all.body.shipments).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ shipmentId: ship.body.shipmentId, orderId: 'O-1004', tenant: 'quillfeather', cancelledAt: null }),
        expect.objectContaining({ shipmentId: 'shp_window_stray', orderId: 'X-0001' }),
      ]),
    );
    const ids: string[] = [];
    for (let after: string | undefined, n = 0; n < 10; n++) {
      const page = await request(h.baseUrl)
        .get('/shipments')
        .query({ since, limit: 1, ...(after ? { after } : {}) })
        .expect(200);
      ids.push(...page.body.shipments.map((s: { shipmentId: string }) => s.shipmentId));
      if (page.body.next === null) break;
      after = page.body.next;
    }
    expect(ids.sort()).toEqual(all.body.shipments.map((s: { shipmentId: string }) => s.shipmentId).sort());

    const later = await request(h.baseUrl)
      .get('/shipments')
      .query({ since: new Date(Date.now() + 60_000).toISOString() })
      .expect(200);
    expect(later.body.shipments).toEqual([]);

    const mail = await request(h.baseUrl).get('/mail/messages').query({ since, limit: 1000 }).expect(200);
    expect(mail.body).toEqual({
      messages: expect.arrayContaining([
        expect.objectContaining({ messageId: sent.body.messageId, orderId: 'O-1004', tenant: 'quillfeather', template: 'reship_created' }),
      ]),
      next: null,
    });
  });

  it('refuses a window it cannot read, and a mail listing naming both or neither of an order and a time (400)', async () => {
    for (const q of [{}, { since: 'yesterday' }]) {
      const res = await request(h.baseUrl).get('/shipments').query(q);
      expect(res.status).toBe(400);
      expect(res.body.error.reason).toBe('invalid_query');
    }
    for (const q of [{}, { since: 'soon' }, { orderId: 'O-1004', since: new Date().toISOString() }]) {
      const res = await request(h.baseUrl).get('/mail/messages').query(q);
      expect(res.status).toBe(400);
    }
  });
});
