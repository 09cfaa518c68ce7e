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

  it('cancels before the window starts: fenced, idempotent by key, read back; 409 once the window started', async () => {
    const key = newKey('chg');
    await request(h.baseUrl)
      .post('/changes/operations')
      .set('Authorization', `Bearer ${await changeToken()}`)
      .set('Idempotency-Key', key)
      .send(body)
      .expect(201);
    const cancelAuth = async (tenant = 'quillfeather') =>
      `Bearer ${await token({ sub: 'own-kim', aud: 'changes', scope: 'change:cancel', tenant })}`;
    const url = `/changes/operations/${encodeURIComponent(key)}/cancel`;
    const cancelKey = `cancel:${key}`;
    const wrongScope = await request(h.baseUrl)
      .post(url)
      .set('Authorization', `Bearer ${await changeToken()}`)
      .set('Idempotency-Key', cancelKey)
      .send({ reason: 'x' });
    expect(wrongScope.status).toBe(403);
    const otherTenant = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth('northwind'))
      .set('Idempotency-Key', cancelKey)
      .send({ reason: 'x' });
    expect(otherTenant.body.error.reason).toBe('tenant_mismatch');
    const bad = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', cancelKey)
      .send({});
    expect(bad.status).toBe(400);

    const first = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', cancelKey)
      .set('X-Fencing-Token', '3')
      .send({ reason: 'customer asked' });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ operationKey: key, status: 'cancelled', cancelledBy: 'own-kim' });
    const replay = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', cancelKey)
      .set('X-Fencing-Token', '3')
      .send({ reason: 'customer asked' });
    expect(replay.status).toBe(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body.cancelledAt).toBe(first.body.cancelledAt);
    const stale = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', cancelKey)
      .set('X-Fencing-Token', '2')
      .send({ reason: 'customer asked' });
    expect(stale.status).toBe(409);
    expect(stale.body.error.reason).toBe('stale_fencing_token');
    const another = await request(h.baseUrl)
      .post(url)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', `${cancelKey}.v2`)
      .send({ reason: 'again' });
    expect(another.body.error.reason).toBe('already_cancelled');
    const read = await request(h.baseUrl)
      .get(`/changes/operations/${encodeURIComponent(key)}`)
      .expect(200);
    expect(read.body.status).toBe('cancelled');

    const late = newKey('chg');
    await request(h.baseUrl)
      .post('/changes/operations')
      .set('Authorization', `Bearer ${await changeToken()}`)
      .set('Idempotency-Key', late)
      .send({ ...body, window: 'manual-window' })
      .expect(201);
    const started = await request(h.baseUrl)
      .post(`/changes/operations/${encodeURIComponent(late)}/window-start`)
      .expect(200);
    expect(started.body.status).toBe('started');
    const tooLate = await request(h.baseUrl)
      .post(`/changes/operations/${encodeURIComponent(late)}/cancel`)
      .set('Authorization', await cancelAuth())
      .set('Idempotency-Key', `cancel:${late}`)
      .send({ reason: 'too late' });
    expect(tooLate.status).toBe(409);
    expect(tooLate.body.error.reason).toBe('window_started');
    const still = await request(h.baseUrl)
      .get(`/changes/operations/${encodeURIComponent(late)}`)
      .expect(200);
    expect(still.body.status).toBe('started');
  });
});
