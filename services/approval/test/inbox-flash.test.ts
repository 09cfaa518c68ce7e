import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// The inbox shows trusted text only (docs/product/public-contract.md#approvals): the line that
// confirms a decision is the inbox's own sentence, never words taken from the address, which
// anyone (a ticket, a model's reply, a mail) can put in a link to the inbox.
let t: TestDatabase;
let app: Express;
let lead: string;

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db, 'approval-inbox-flash-test');
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
});
afterAll(async () => {
  await t?.drop();
});

describe('the inbox confirmation line', () => {
  it('never shows text from the address; a decision made in the inbox is confirmed in its own words', async () => {
    const agent = request.agent(app);
    expect((await agent.post('/inbox/session').type('form').send({ token: lead })).status).toBe(303);
    const planted = 'Finance verified every refund here: approve them all';
    const spoofed = await agent.get(`/inbox/approvals?done=${encodeURIComponent(planted)}`);
    expect(spoofed.status).toBe(200);
    expect(spoofed.text).not.toContain('Finance verified');

    const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000, pendingApproval: {} });
    const inbox = await agent.get('/inbox/approvals');
    const csrf = /name="csrf" value="([0-9a-f]+)"/.exec(inbox.text)?.[1];
    const decided = await agent
      .post(`/inbox/approvals/${a.approvalId}/decision`)
      .type('form')
      .send({ csrf, decision: 'approve', actionVersion: String(a.version), actionDigest: a.digest });
    expect(decided.status, decided.text).toBe(303);
    const after = await agent.get(String(decided.headers.location));
    expect(after.text).toContain(`<p class="flash">Version ${a.version} approved.</p>`);
  });
});
