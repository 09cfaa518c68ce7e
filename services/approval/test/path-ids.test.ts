import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// An approval id in a path that is no uuid names nothing: 404, never a uuid cast that Postgres
// rejects (which answered 500). The inbox answers it with its HTML refusal page.
const NOT_UUIDS = ['not-a-uuid', '-'.repeat(36), '0123456789abcdef0123456789abcdef0123', '0000000g-0000-4000-8000-000000000000'];
let t: TestDatabase;
let app: Express;
let lead: string;
let pending: { actionVersion: number; actionDigest: string };

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db, 'approval-path-ids-test');
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  // One pending approval lead-eli may decide: the inbox renders its form (and the session's CSRF token).
  const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000 });
  await t.db
    .updateTable('approvals')
    .set({ status: 'pending', approver: null, decided_at: null })
    .where('id', '=', a.approvalId!)
    .execute();
  pending = { actionVersion: 1, actionDigest: a.digest };
});
afterAll(async () => {
  await t?.drop();
});

describe('approval ids that are no uuid', () => {
  it('the API: GET and POST decision answer 404 not_found', async () => {
    for (const id of NOT_UUIDS) {
      const got = await request(app).get(`/v1/approvals/${id}`).set('authorization', `Bearer ${lead}`);
      expect(got.status, id).toBe(404);
      expect(got.body.error.reason).toBe('not_found');
      const decided = await request(app)
        .post(`/v1/approvals/${id}/decision`)
        .set('authorization', `Bearer ${lead}`)
        .send({ decision: 'approve', ...pending });
      expect(decided.status, id).toBe(404);
      expect(decided.body.error.reason).toBe('not_found');
    }
  });

  it('the inbox, signed in with a valid CSRF token: 404 with its HTML refusal page', async () => {
    const agent = request.agent(app);
    const signedIn = await agent.post('/inbox/session').type('form').send({ token: lead });
    expect(signedIn.status).toBe(303);
    const inbox = await agent.get('/inbox/approvals');
    expect(inbox.status).toBe(200);
    const csrf = /name="csrf" value="([0-9a-f]+)"/.exec(inbox.text)?.[1];
    expect(csrf, inbox.text).toBeDefined();
    for (const id of NOT_UUIDS) {
      const r = await agent
        .post(`/inbox/approvals/${id}/decision`)
        .type('form')
        .send({ csrf, decision: 'approve', actionVersion: String(pending.actionVersion), actionDigest: pending.actionDigest });
      expect(r.status, `${id}: ${r.text}`).toBe(404);
      expect(r.type).toBe('text/html');
      expect(r.text).toContain('The decision was not recorded: not_found.');
    }
    // Nothing was decided on the way.
    const still = await t.db.selectFrom('approvals').select('status').executeTakeFirstOrThrow();
    expect(still.status).toBe('pending');
  });
});
