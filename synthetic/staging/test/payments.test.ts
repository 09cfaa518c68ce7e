import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { newKey, startStaging, strangerKey, token, type StagingHarness } from './support/staging.harness.ts';

let h: StagingHarness;
beforeAll(async () => {
  // The ledger's own semantics with reusable tokens; the token binding: test/credentials/delegated-tokens.test.ts.
  h = await startStaging({ tokenBinding: false });
});
afterAll(async () => {
  await h?.stop();
});

async function refund(opts: { key?: string; orderId?: string; amountCents?: number; auth?: string; fence?: number }) {
  const req = request(h.baseUrl).post('/ledger/refunds');
  if (opts.key !== undefined) req.set('Idempotency-Key', opts.key);
  if (opts.fence !== undefined) req.set('X-Fencing-Token', String(opts.fence));
  req.set('Authorization', `Bearer ${opts.auth ?? (await token())}`);
  return req.send({ orderId: opts.orderId ?? 'O-1001', amountCents: opts.amountCents ?? 3000, reason: 'damaged item' });
}

async function refundsOf(orderId: string, key?: string) {
  const res = await request(h.baseUrl).get('/ledger/refunds').query({ orderId }).expect(200);
  const refunds = res.body.refunds as Array<{ idempotencyKey: string; amountCents: number; requester: string }>;
  return key === undefined ? refunds : refunds.filter((r) => r.idempotencyKey === key);
}

describe('payments ledger', () => {
  it('creates a refund (201) and replays a repeated key (200, one row)', async () => {
    const key = newKey();
    const first = await refund({ key });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ orderId: 'O-1001', amountCents: 3000, idempotencyKey: key });
    expect(first.headers['idempotent-replayed']).toBeUndefined();

    const again = await refund({ key });
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);

    const rows = await refundsOf('O-1001', key);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ amountCents: 3000, requester: 'rep-ana', reason: 'damaged item' });
  });

  it('refuses the same key with another amount (409 idempotency_key_reuse)', async () => {
    const key = newKey();
    expect((await refund({ key, amountCents: 3000 })).status).toBe(201);
    const res = await refund({ key, amountCents: 4000 });
    expect(res.status).toBe(409);
    expect(res.body.error.reason).toBe('idempotency_key_reuse');
    expect(await refundsOf('O-1001', key)).toEqual([expect.objectContaining({ amountCents: 3000 })]);
  });

  it('requires an Idempotency-Key (400) and a token (401)', async () => {
    const noKey = await refund({});
    expect(noKey.status).toBe(400);
    expect(noKey.body.error.reason).toBe('missing_idempotency_key');

    const noToken = await request(h.baseUrl)
      .post('/ledger/refunds')
      .set('Idempotency-Key', newKey())
      .send({ orderId: 'O-1001', amountCents: 100, reason: 'x' });
    expect(noToken.status).toBe(401);
    expect(noToken.body.error.reason).toBe('missing_token');

    const forged = await refund({ key: newKey(), auth: await token({}, await strangerKey()) });
    expect(forged.status).toBe(401);
    expect(forged.body.error.reason).toMatch(/^invalid_token/);
  });

  it('enforces the delegated ceiling itself (403 ceiling_exceeded, no row)', async () => {
    const key = newKey();
    const res = await refund({ key, orderId: 'O-1002', amountCents: 20_000, auth: await token({ ceiling: 10_000 }) });
    expect(res.status).toBe(403);
    expect(res.body.error.reason).toBe('ceiling_exceeded');
    expect(await refundsOf('O-1002', key)).toHaveLength(0);
  });

  it('refuses a token for another audience or scope (403, no row)', async () => {
    const key = newKey();
    const aud = await refund({ key, auth: await token({ aud: 'orders', scope: 'reship:create' }) });
    expect(aud.status).toBe(403);
    expect(aud.body.error.reason).toBe('wrong_audience');
    const scope = await refund({ key, auth: await token({ scope: 'mail:send' }) });
    expect(scope.status).toBe(403);
    expect(scope.body.error.reason).toBe('wrong_scope');
    expect(await refundsOf('O-1001', key)).toHaveLength(0);
  });

  it('refuses a token minted before the current revocation epoch (403 revoked_epoch)', async () => {
    await h.setEpoch(3);
    try {
      const key = newKey();
      const stale = await refund({ key, auth: await token({ epoch: 2 }) });
      expect(stale.status).toBe(403);
      expect(stale.body.error.reason).toBe('revoked_epoch');
      expect(await refundsOf('O-1001', key)).toHaveLength(0);
      expect((await refund({ key, auth: await token({ epoch: 3 }) })).status).toBe(201);
    } finally {
      await h.setEpoch(0);
    }
  });

  it('refuses an order of another tenant (403 tenant_mismatch) and an unknown order (404)', async () => {
    const key = newKey();
    const res = await refund({ key, orderId: 'N-2001' });
    expect(res.status).toBe(403);
    expect(res.body.error.reason).toBe('tenant_mismatch');
    expect(await refundsOf('N-2001', key)).toHaveLength(0);
    const missing = await refund({ key: newKey(), orderId: 'O-9999' });
    expect(missing.status).toBe(404);
  });

  it('refuses a stale fencing token (409 stale_fencing_token, no second row)', async () => {
    const key = newKey();
    expect((await refund({ key, fence: 5 })).status).toBe(201);
    const stale = await refund({ key, fence: 4 });
    expect(stale.status).toBe(409);
    expect(stale.body.error.reason).toBe('stale_fencing_token');
    const newer = await refund({ key, fence: 6 });
    expect(newer.status).toBe(200);
    expect((await refund({ key, fence: 5 })).status).toBe(409);
    expect(await refundsOf('O-1001', key)).toHaveLength(1);

    const fresh = newKey();
    expect((await refund({ key: fresh, fence: 9 })).status).toBe(201);
    expect((await refund({ key: fresh, fence: 2, amountCents: 1 })).body.error.reason).toBe('stale_fencing_token');
    expect(await refundsOf('O-1001', fresh)).toHaveLength(1);
  });

  it('converges 20 concurrent requests with one key on exactly one refund (10 races)', async () => {
    const auth = await token();
    for (let race = 0; race < 10; race++) {
      const key = newKey(`race${race}`);
      const results = await Promise.all(
        Array.from({ length: 20 }, () =>
          request(h.baseUrl)
            .post('/ledger/refunds')
            .set('Authorization', `Bearer ${auth}`)
            .set('Idempotency-Key', key)
            .send({ orderId: 'O-1004', amountCents: 1234, reason: 'race' }),
        ),
      );
      const statuses = results.map((r) => r.status).sort();
      expect(statuses.filter((s) => s === 201)).toHaveLength(1);
      expect(statuses.filter((s) => s === 200)).toHaveLength(19);
      expect(new Set(results.map((r) => r.body.refundId)).size).toBe(1);
      expect(await refundsOf('O-1004', key)).toHaveLength(1);
    }
  });

  it('rejects an invalid body before any effect (400)', async () => {
    const key = newKey();
    const res = await request(h.baseUrl)
      .post('/ledger/refunds')
      .set('Authorization', `Bearer ${await token()}`)
      .set('Idempotency-Key', key)
      .send({ orderId: 'O-1001', amountCents: 12.5, reason: 'x', tenant: 'northwind' });
    expect(res.status).toBe(400);
    expect(res.body.error.reason).toBe('invalid_body');
  });
});
