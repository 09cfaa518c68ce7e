import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { pollWorkflow, tokenFor } from '@gatehouse/cli';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';

// Abuse limits against every service as a process (docs/decisions/0181-abuse-limits.md,
// 0183-tenant-model-spend-cap.md): per-user and per-tenant intake and sign-in limits (429,
// Retry-After, a reason; other tenants unaffected) and the per-tenant daily model-spend cap
// (the run stops before its next model request). The window is long so it cannot roll over mid-test.
const SECRET = 'local-auth-secret-change-me';
const LIMITS = {
  RATE_LIMIT_WINDOW_SECONDS: '3600',
  INTAKE_RATE_PER_USER: '3',
  INTAKE_RATE_PER_TENANT: '6',
  SIGNIN_RATE_PER_USER: '3',
  SIGNIN_RATE_PER_TENANT: '100',
  // One micro-USD: the first model request of a tenant's day is dispatched, nothing after it.
  TENANT_DAILY_SPEND_MICRO_USD: '1',
};
let s: E2EStack;

beforeAll(async () => {
  s = await startE2EStack(LIMITS);
});
afterAll(async () => {
  await s?.close();
});

const submit = async (user: string, ticketId: string) =>
  request(s.url('agent-loop'))
    .post('/v1/tickets')
    .set('authorization', `Bearer ${await tokenFor(user, SECRET)}`)
    .send({ ticketId, text: 'What is the status of order O-1001?' });
const modelRequests = async (workflowId: string): Promise<number> =>
  (await request(s.url('model-stub')).get(`/requests?workflowId=${workflowId}`)).body.requests.length;
const tenantWorkflows = async (tenant: string): Promise<number> =>
  Number(
    (
      await s.db.db
        .selectFrom('workflows')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('tenant', '=', tenant)
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('abuse limits', () => {
  it("the tenant's daily model-spend cap stops the run before its next model request", async () => {
    const r = await submit('rep-ana', 'CAP-1');
    expect(r.status).toBe(202);
    const token = await tokenFor('rep-ana', SECRET);
    const v = await pollWorkflow(s.url('agent-loop'), token, r.body.workflowId, (w) => w.state === 'stopped', undefined, 120_000);
    expect(v.stopReason).toBe('budget_exhausted');
    expect(v.nextStep).toMatch(/daily model-spend cap/);
    // The lookup ran after the first answer; the second round was never sent to the model.
    expect(await modelRequests(r.body.workflowId)).toBe(1);
  });

  it('intake: 429 past the per-user limit with Retry-After and a reason, the tenant limit next, other tenants unaffected', async () => {
    for (const id of ['B-1', 'B-2', 'B-3']) expect((await submit('rep-ben', id)).status).toBe(202);
    const over = await submit('rep-ben', 'B-4');
    expect(over.status).toBe(429);
    expect(Number(over.headers['retry-after'])).toBeGreaterThan(0);
    expect(over.body.error.reason).toBe('rate_limited_user');
    // A follow-up message is intake too.
    const wf = (await s.db.db.selectFrom('workflows').select('id').where('user_id', '=', 'rep-ben').executeTakeFirstOrThrow()).id;
    const message = await request(s.url('agent-loop'))
      .post(`/v1/workflows/${wf}/messages`)
      .set('authorization', `Bearer ${await tokenFor('rep-ben', SECRET)}`)
      .send({ text: 'Any news?' });
    expect(message.status).toBe(429);
    // The tenant has 1 (rep-ana) + 3 (rep-ben) of its 6; rep-eva gets two, then the tenant is over.
    expect((await submit('rep-eva', 'E-1')).status).toBe(202);
    expect((await submit('rep-eva', 'E-2')).status).toBe(202);
    const tenantOver = await submit('rep-eva', 'E-3');
    expect(tenantOver.status).toBe(429);
    expect(tenantOver.body.error.reason).toBe('rate_limited_tenant');
    // Refused requests created nothing; another tenant is not affected.
    expect(await tenantWorkflows('quillfeather')).toBe(6);
    expect((await submit('rep-ivy', 'I-1')).status).toBe(202);
  });

  it('sign-in: 429 past the per-user limit at the inbox and the ops dashboard; other users unaffected', async () => {
    const signIn = (service: string, path: string, userId: string) =>
      request(s.url(service)).post(path).type('form').send({ userId }).redirects(0);
    // The test stack offers the local user chooser: a sign-in is a redirect to the inbox.
    for (let i = 0; i < 3; i++) expect((await signIn('approval', '/inbox/session', 'lead-eli')).status).toBe(303);
    const over = await signIn('approval', '/inbox/session', 'lead-eli');
    expect(over.status).toBe(429);
    expect(Number(over.headers['retry-after'])).toBeGreaterThan(0);
    expect(over.body.error.reason).toBe('rate_limited_user');
    expect((await signIn('approval', '/inbox/session', 'lead-jon')).status).toBe(303);
    for (let i = 0; i < 3; i++) expect((await signIn('ops', '/session', 'ops-gus')).status).toBe(303);
    expect((await signIn('ops', '/session', 'ops-gus')).status).toBe(429);
  });

  it('controls removed (GATEHOUSE_TEST_DISABLE_RATE_LIMITS, _TENANT_SPEND_CAP): no 429 and the capped tenant calls the model again', async () => {
    await s.stack.restart('agent-loop', { GATEHOUSE_TEST_DISABLE_RATE_LIMITS: '1', GATEHOUSE_TEST_DISABLE_TENANT_SPEND_CAP: '1' });
    await s.stack.restart('approval', { GATEHOUSE_TEST_DISABLE_RATE_LIMITS: '1' });
    expect((await submit('rep-ben', 'B-5')).status).toBe(202);
    const signIn = await request(s.url('approval')).post('/inbox/session').type('form').send({ userId: 'lead-eli' }).redirects(0);
    expect(signIn.status).toBe(303);
    const r = await submit('rep-ana', 'CAP-2');
    expect(r.status).toBe(202);
    const token = await tokenFor('rep-ana', SECRET);
    const v = await pollWorkflow(s.url('agent-loop'), token, r.body.workflowId, (w) => w.state === 'completed', undefined, 120_000);
    expect(v.state).toBe('completed');
    expect(await modelRequests(r.body.workflowId)).toBeGreaterThan(1);
  });
});
