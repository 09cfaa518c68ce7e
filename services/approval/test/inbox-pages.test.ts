import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';
import { INBOX_PAGE_SIZE } from '../src/http/inbox.router.ts';
import { encodeCursor } from '../src/domain/approval-view.ts';

// The approver's inbox lists the tenant's pending approvals a page at a time (ADR 0723): it read
// and rendered every one of them in one request, so a tenant with thousands waiting made one
// unbounded query and page. Oldest first; a link carries the cursor of the next page; following
// the links shows each pending approval once.
const PENDING = 2 * INBOX_PAGE_SIZE + 7;
let t: TestDatabase;
let app: Express;
let lead: string;
const created: string[] = [];
let northwind = '';

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db, 'approval-inbox-pages-test');
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  for (let i = 0; i < PENDING; i++)
    created.push((await createAction(t.db, { orderId: 'O-1002', amountCents: 6000, pendingApproval: {} })).approvalId!);
  // Another tenant's approval, opened after every one of quillfeather's.
  northwind = (
    await createAction(t.db, { orderId: 'N-2001', amountCents: 6000, userId: 'rep-ivy', tenant: 'northwind', pendingApproval: {} })
  ).approvalId!;
}, 120_000);
afterAll(async () => {
  await t?.drop();
});

const cardsOf = (html: string): string[] => [...html.matchAll(/data-approval="([0-9a-f-]+)"/g)].map((m) => m[1]!);
const nextOf = (html: string): string | null => /<a href="(\/inbox\/approvals\?after=[A-Za-z0-9_-]+)">/.exec(html)?.[1] ?? null;

describe('the inbox, a page at a time', () => {
  it(`${PENDING} pending approvals: pages of ${INBOX_PAGE_SIZE}, oldest first, each approval once, the last page without a link`, async () => {
    const agent = request.agent(app);
    expect((await agent.post('/inbox/session').type('form').send({ token: lead })).status).toBe(303);
    const seen: number[] = [];
    const ids: string[] = [];
    let url: string | null = '/inbox/approvals';
    for (let n = 0; url && n < 10; n++) {
      const res = await agent.get(url);
      expect(res.status).toBe(200);
      const cards = cardsOf(res.text);
      seen.push(cards.length);
      ids.push(...cards);
      url = nextOf(res.text);
    }
    expect(seen).toEqual([INBOX_PAGE_SIZE, INBOX_PAGE_SIZE, 7]);
    expect(ids).toEqual(created);
  });

  it('a cursor that is not one the inbox made shows the first page', async () => {
    const agent = request.agent(app);
    await agent.post('/inbox/session').type('form').send({ token: lead });
    const res = await agent.get('/inbox/approvals?after=not-a-cursor');
    expect(res.status).toBe(200);
    expect(cardsOf(res.text)).toEqual(created.slice(0, INBOX_PAGE_SIZE));
  });

  it("a cursor naming another tenant's approval shows the first page, not the page after that approval (ADR 0758)", async () => {
    const agent = request.agent(app);
    await agent.post('/inbox/session').type('form').send({ token: lead });
    const res = await agent.get(`/inbox/approvals?after=${encodeCursor(northwind)}`);
    expect(res.status).toBe(200);
    expect(cardsOf(res.text)).toEqual(created.slice(0, INBOX_PAGE_SIZE));
    expect(res.text).not.toContain(northwind);
  });
});
