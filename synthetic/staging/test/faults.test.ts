import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import request from 'supertest';
import { closeServer } from '@gatehouse/platform';
import { newKey, startStaging, token, type StagingHarness } from './support/staging.harness.ts';

let h: StagingHarness;
beforeAll(async () => {
  // The ledger's own semantics with reusable tokens; the token binding: test/credentials/delegated-tokens.test.ts.
  h = await startStaging({ tokenBinding: false });
});
afterAll(async () => {
  await h?.stop();
});
beforeEach(async () => {
  await request(h.baseUrl).delete('/faults').expect(200);
});

async function arm(spec: Record<string, unknown>) {
  return request(h.baseUrl).post('/faults').send(spec).expect(201);
}

async function postRefund(key: string, orderId = 'O-1007', amountCents = 2500) {
  return request(h.baseUrl)
    .post('/ledger/refunds')
    .set('Authorization', `Bearer ${await token()}`)
    .set('Idempotency-Key', key)
    .send({ orderId, amountCents, reason: 'fault test' });
}

async function refundsWithKey(key: string, orderId = 'O-1007') {
  const res = await request(h.baseUrl).get('/ledger/refunds').query({ orderId }).expect(200);
  return (res.body.refunds as Array<{ idempotencyKey: string }>).filter((r) => r.idempotencyKey === key);
}

describe('fault switches', () => {
  it('commit_then_lose_response: socket error, yet the refund committed; the retry replays it', async () => {
    await arm({ target: 'payments', mode: 'commit_then_lose_response' });
    const key = newKey('lost');
    const lost = await postRefund(key).then(
      () => undefined,
      (err: NodeJS.ErrnoException) => err,
    );
    expect(lost).toBeInstanceOf(Error);
    expect(lost?.code ?? lost?.message).toMatch(/ECONNRESET|socket hang up/);
    expect(await refundsWithKey(key)).toHaveLength(1);

    const retry = await postRefund(key);
    expect(retry.status).toBe(200);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(await refundsWithKey(key)).toHaveLength(1);
  });

  it('rate_limit: 429 with Retry-After (s, rounded up) and retry-after-ms, no effect, then disarms', async () => {
    await arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 1500 });
    const key = newKey('rl');
    const limited = await postRefund(key);
    expect(limited.status).toBe(429);
    expect(limited.headers['retry-after']).toBe('2');
    expect(limited.headers['retry-after-ms']).toBe('1500');
    expect(await refundsWithKey(key)).toHaveLength(0);
    expect((await postRefund(key)).status).toBe(201);
  });

  it('server_error: answers the configured 5xx `times` times without effect', async () => {
    await arm({ target: 'orders', mode: 'server_error', status: 502, times: 2 });
    const auth = `Bearer ${await token({ aud: 'orders', scope: 'reship:create' })}`;
    for (let i = 0; i < 2; i++) {
      expect((await request(h.baseUrl).post('/orders/O-0812/shipments').set('Authorization', auth).send({})).status).toBe(502);
    }
    expect((await request(h.baseUrl).get('/orders/O-0812/shipments')).body.shipments).toHaveLength(0);
    expect((await request(h.baseUrl).post('/orders/O-0812/shipments').set('Authorization', auth).send({})).status).toBe(201);
  });

  it('latency: delays, then performs the effect', async () => {
    await arm({ target: 'mail', mode: 'latency', latencyMs: 150 });
    const started = Date.now();
    const res = await request(h.baseUrl)
      .post('/mail/messages')
      .set('Authorization', `Bearer ${await token({ aud: 'mail', scope: 'mail:send' })}`)
      .send({ orderId: 'O-1001', template: 'apology' });
    expect(res.status).toBe(201);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('hang: never answers and has no effect; the client gives up', async () => {
    await arm({ target: 'payments', mode: 'hang' });
    const key = newKey('hang');
    const outcome = await fetch(`${h.baseUrl}/ledger/refunds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await token()}`, 'idempotency-key': key },
      body: JSON.stringify({ orderId: 'O-1007', amountCents: 100, reason: 'hang' }),
      signal: AbortSignal.timeout(300),
    }).then(
      () => 'answered',
      (err: Error) => err.name,
    );
    expect(outcome).toBe('TimeoutError');
    expect(await refundsWithKey(key)).toHaveLength(0);
    const log = await request(h.baseUrl).get('/requests').query({ target: 'payments' }).expect(200);
    expect(log.body.requests.find((r: { idempotencyKey: string }) => r.idempotencyKey === key)).toMatchObject({
      status: null,
      reason: 'fault:hang',
    });
  });

  it('applies only to POSTs of its own target and is listed until it disarms', async () => {
    await arm({ target: 'mail', mode: 'server_error', times: 3 });
    await request(h.baseUrl).get('/mail/messages').query({ orderId: 'O-1001' }).expect(200);
    expect((await postRefund(newKey('other'))).status).toBe(201);
    const listed = await request(h.baseUrl).get('/faults').expect(200);
    expect(listed.body.faults).toEqual([expect.objectContaining({ target: 'mail', mode: 'server_error', remaining: 3, status: 503 })]);
    expect((await request(h.baseUrl).delete('/faults').expect(200)).body.cleared).toBe(1);
    expect((await request(h.baseUrl).get('/faults')).body.faults).toEqual([]);
  });

  it('refuses an invalid fault specification (400)', async () => {
    await request(h.baseUrl).post('/faults').send({ target: 'billing', mode: 'hang' }).expect(400);
    await request(h.baseUrl).post('/faults').send({ target: 'mail', mode: 'explode' }).expect(400);
  });
});

describe('hang and shutdown', () => {
  it('server close completes while a request hangs (the hung socket is destroyed)', async () => {
    const own = await startStaging({ tokenBinding: false });
    try {
      await request(own.baseUrl).post('/faults').send({ target: 'payments', mode: 'hang' }).expect(201);
      const pending = fetch(`${own.baseUrl}/ledger/refunds`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await token()}`, 'idempotency-key': newKey() },
        body: JSON.stringify({ orderId: 'O-1007', amountCents: 100, reason: 'hang' }),
      }).then(
        () => 'answered',
        () => 'failed',
      );
      // Wait until the hang is recorded, i.e. the request is parked on the server.
      for (let i = 0; i < 100; i++) {
        const log = await own.db.selectFrom('staging.request_log').select('reason').execute();
        if (log.some((r) => r.reason === 'fault:hang')) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      await closeServer(own.server); // would never resolve if the hung socket were kept open
      expect(await pending).toBe('failed');
    } finally {
      await own.stop();
    }
  });
});
