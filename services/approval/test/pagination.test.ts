import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import type { OutboxRelay } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';
import { encodeCursor } from '../src/domain/approval-view.ts';

// GET /v1/approvals is paginated: limit ≤ 100, an opaque keyset cursor, 400 on bad values
// (docs/decisions/0182-approval-pagination.md).
let t: TestDatabase;
let app: Express;
let lead: string;
const visible = new Set<string>();
const approved = new Set<string>();
let otherTenant = '';

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db, 'approval-test', { relay: {} as OutboxRelay }); // GET never publishes
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  // 23 pending approvals lead-eli may decide, 6 pending EU ones he may not, 7 approved, 1 of another tenant.
  for (let i = 0; i < 36; i++) {
    const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000 });
    const id = a.approvalId!;
    if (i < 29) {
      await t.db
        .updateTable('approvals')
        .set({ status: 'pending', approver: null, decided_at: null, region: i < 23 ? 'US' : 'EU' })
        .where('id', '=', id)
        .execute();
      if (i < 23) visible.add(id);
    } else approved.add(id);
  }
  otherTenant = (await createAction(t.db, { orderId: 'N-2001', amountCents: 6000, userId: 'rep-ivy', tenant: 'northwind' })).approvalId!;
  // Ties on created_at: the cursor must order by id as well.
  await t.db
    .updateTable('approvals')
    .set({ created_at: new Date('2026-12-01T10:00:00Z') })
    .execute();
});
afterAll(async () => {
  await t?.drop();
});

/** Walks every page of `status` with `limit`, returning the ids in order and the page sizes. */
async function walk(status: string, limit: number): Promise<{ ids: string[]; pages: number[] }> {
  const ids: string[] = [];
  const pages: number[] = [];
  let cursor: string | null = null;
  for (let n = 0; n < 100; n++) {
    const query: Record<string, string> = { status, limit: String(limit), ...(cursor ? { cursor } : {}) };
    const res = await request(app).get('/v1/approvals').query(query).set('authorization', `Bearer ${lead}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    ids.push(...res.body.approvals.map((a: { approvalId: string }) => a.approvalId));
    pages.push(res.body.approvals.length);
    cursor = res.body.nextCursor;
    if (!cursor) return { ids, pages };
  }
  throw new Error('more than 100 pages');
}

describe('GET /v1/approvals pages', () => {
  it('walks every pending approval the lead may decide, once each, in full pages', async () => {
    const { ids, pages } = await walk('pending', 4);
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(ids)).toEqual(visible);
    expect(pages).toEqual([4, 4, 4, 4, 4, 3]);
  });

  it('walks other statuses the same way, and the last page has no cursor', async () => {
    const { ids, pages } = await walk('approved', 3);
    expect(new Set(ids)).toEqual(approved);
    expect(ids).toHaveLength(approved.size);
    expect(pages).toEqual([3, 3, 1]);
  });

  it('defaults to 50 and accepts 100', async () => {
    const res = await request(app).get('/v1/approvals?limit=100').set('authorization', `Bearer ${lead}`);
    expect(res.status).toBe(200);
    expect(res.body.approvals).toHaveLength(23);
    expect(res.body.nextCursor).toBeNull();
  });

  it.each([
    ['limit=0', 'invalid_query'],
    ['limit=101', 'invalid_query'],
    ['limit=abc', 'invalid_query'],
    ['limit=2.5', 'invalid_query'],
    // one limit, one spelling: what Number() also reads is refused (was accepted as 10, 16, 5)
    ['limit=1e1', 'invalid_query'],
    ['limit=0x10', 'invalid_query'],
    ['limit=%2B5', 'invalid_query'],
    ['limit=%205', 'invalid_query'],
    ['limit=', 'invalid_query'],
    ['limit=5&limit=6', 'invalid_query'],
    ['cursor=not-a-cursor!', 'invalid_cursor'],
    ['cursor=a&cursor=b', 'invalid_query'],
    ['cursor=bm90LW91cnM', 'invalid_cursor'],
    [`cursor=${encodeCursor('00000000-0000-4000-8000-000000000000')}`, 'invalid_cursor'],
  ])('400 on %s', async (query, reason) => {
    const res = await request(app).get(`/v1/approvals?${query}`).set('authorization', `Bearer ${lead}`);
    expect(res.status).toBe(400);
    expect(res.body.error.reason).toBe(reason);
  });

  it("400 on a cursor naming another tenant's approval", async () => {
    const res = await request(app)
      .get(`/v1/approvals?cursor=${encodeCursor(otherTenant)}`)
      .set('authorization', `Bearer ${lead}`);
    expect(res.status).toBe(400);
    expect(res.body.error.reason).toBe('invalid_cursor');
  });
});
