import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// The inbox's own form with a field it cannot take (a reason past 500 characters, a NUL in it)
// is answered 400 naming the field, not 403 "not issued by this inbox (CSRF check failed)":
// an approver must not be told their form was forged. A missing or wrong CSRF token is still 403.
let t: TestDatabase;
let app: Express;
let lead: string;
let pending: { approvalId: string; actionVersion: number; actionDigest: string };

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db, 'approval-inbox-form-test');
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000 });
  await t.db
    .updateTable('approvals')
    .set({ status: 'pending', approver: null, decided_at: null })
    .where('id', '=', a.approvalId!)
    .execute();
  pending = { approvalId: a.approvalId!, actionVersion: 1, actionDigest: a.digest };
});
afterAll(async () => {
  await t?.drop();
});

describe('an inbox decision form with a field the inbox cannot take', () => {
  it('is 400 naming the field; a wrong CSRF token is still 403; nothing is decided', async () => {
    const agent = request.agent(app);
    expect((await agent.post('/inbox/session').type('form').send({ token: lead })).status).toBe(303);
    const inbox = await agent.get('/inbox/approvals');
    const csrf = /name="csrf" value="([0-9a-f]+)"/.exec(inbox.text)?.[1];
    expect(csrf, inbox.text).toBeDefined();
    const form = { csrf, decision: 'deny', actionVersion: String(pending.actionVersion), actionDigest: pending.actionDigest };
    for (const reason of ['x'.repeat(501), 'broken\u0000box']) {
      const r = await agent
        .post(`/inbox/approvals/${pending.approvalId}/decision`)
        .type('form')
        .send({ ...form, reason });
      expect(r.status, r.text).toBe(400);
      expect(r.type).toBe('text/html');
      expect(r.text).toContain("The decision was not recorded: the form's reason cannot be taken");
      expect(r.text).not.toContain('CSRF');
    }
    const forged = await agent
      .post(`/inbox/approvals/${pending.approvalId}/decision`)
      .type('form')
      .send({ ...form, csrf: '0'.repeat(64) });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('CSRF check failed');
    const still = await t.db.selectFrom('approvals').select('status').where('id', '=', pending.approvalId).executeTakeFirstOrThrow();
    expect(still.status).toBe('pending');
  });
});
