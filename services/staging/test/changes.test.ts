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

const changeToken = (tenant = 'quillfeather') => token({ sub: 'eng-lou', aud: 'changes', scope: 'change:schedule', tenant });
const body = { planId: 'plan_abcdefgh12345678', changeId: 'CHG-101', window: 'next-maintenance-window', note: null };

describe('change service', () => {
  it('serves seeded change records', async () => {
    const res = await request(h.baseUrl).get('/changes/CHG-101').expect(200);
    expect(res.body).toMatchObject({ id: 'CHG-101', tenant: 'quillfeather', environment: 'staging', service: 'billing-api' });
    await request(h.baseUrl).get('/changes/CHG-999').expect(404);
  });

  it('schedules once per operation key: 201, replay 200, other parameters 409', async () => {
    const key = newKey('chg');
    const auth = `Bearer ${await changeToken()}`;
    const first = await request(h.baseUrl).post('/changes/operations').set('Authorization', auth).set('Idempotency-Key', key).send(body);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({
      operationKey: key,
      status: 'scheduled',
      planId: body.planId,
      changeId: 'CHG-101',
      note: null,
      requester: 'eng-lou',
    });

    const replay = await request(h.baseUrl).post('/changes/operations').set('Authorization', auth).set('Idempotency-Key', key).send(body);
    expect(replay.status).toBe(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(first.body);

    const other = await request(h.baseUrl)
      .post('/changes/operations')
      .set('Authorization', auth)
      .set('Idempotency-Key', key)
      .send({ ...body, window: 'manual-window' });
    expect(other.status).toBe(409);
    expect(other.body.error.reason).toBe('idempotency_key_reuse');

    const read = await request(h.baseUrl)
      .get(`/changes/operations/${encodeURIComponent(key)}`)
      .expect(200);
    expect(read.body).toEqual(first.body);
    await request(h.baseUrl).get('/changes/operations/nope').expect(404);
  });

  it('refuses another tenant, a missing key and a malformed plan id', async () => {
    const auth = `Bearer ${await changeToken('northwind')}`;
    const other = await request(h.baseUrl)
      .post('/changes/operations')
      .set('Authorization', auth)
      .set('Idempotency-Key', newKey())
      .send(body);
    expect(other.status).toBe(403);
    expect(other.body.error.reason).toBe('tenant_mismatch');
    const own = `Bearer ${await changeToken()}`;
    const noKey = await request(h.baseUrl).post('/changes/operations').set('Authorization', own).send(body);
    expect(noKey.status).toBe(400);
    const badPlan = await request(h.baseUrl)
      .post('/changes/operations')
      .set('Authorization', own)
      .set('Idempotency-Key', newKey())
      .send({ ...body, planId: 'plan_X' });
    expect(badPlan.status).toBe(400);
  });
});
