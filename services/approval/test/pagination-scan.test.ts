import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import type { KyselyPlugin } from 'kysely';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';
import { listApprovalPage } from '../src/domain/approval-view.ts';

/**
 * Pending approvals the caller may not decide cost a page request a bounded number of ledger
 * reads (docs/decisions/0722-a-page-request-examines-a-bounded-number-of-rows.md). Before the fix
 * `GET /v1/approvals?limit=1` read one row a query past every approval the lead could not decide:
 * 800 of them took 7 s on this machine, and a few more passed the response deadline (503
 * `dependency_unavailable` while the ledger was fine, the scan going on after the answer).
 * Real Postgres; the app counts the queries it sends.
 */
const HIDDEN = 240; // pending EU approvals lead-eli (US) may not decide, created first
const SHOWN = 3; // pending US ones he may decide, created after them
let t: TestDatabase;
let app: Express;
let lead = '';
let queries = 0;
const shown: string[] = [];

/** Counts every query the app sends. */
const counting: KyselyPlugin = {
  transformQuery: (args) => {
    queries++;
    return args.node;
  },
  transformResult: async (args) => args.result,
};

beforeAll(async () => {
  t = await createTestDatabase();
  app = testApprovalApp(t.db.withPlugin(counting), 'approval-scan-test');
  lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  for (let i = 0; i < HIDDEN + SHOWN; i++) {
    const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000, pendingApproval: {} });
    await t.db
      .updateTable('approvals')
      .set({ region: i < HIDDEN ? 'EU' : 'US' })
      .where('id', '=', a.approvalId!)
      .execute();
    if (i >= HIDDEN) shown.push(a.approvalId!);
  }
}, 120_000);
afterAll(async () => {
  await t?.drop();
});

/** One page as lead-eli; returns its ids, its cursor and the queries it took. */
async function page(limit: number, cursor: string | null) {
  const before = queries;
  const res = await request(app)
    .get('/v1/approvals')
    .query({ limit: String(limit), ...(cursor ? { cursor } : {}) })
    .set('authorization', `Bearer ${lead}`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const body = res.body as { approvals: Array<{ approvalId: string }>; nextCursor: string | null };
  return { ids: body.approvals.map((a) => a.approvalId), cursor: body.nextCursor, queries: queries - before };
}

describe('a page past many approvals the caller may not decide', () => {
  it(`limit=1 past ${HIDDEN} hidden approvals: a handful of queries per page, every decidable one once`, async () => {
    const ids: string[] = [];
    let cursor: string | null = null;
    for (let n = 0; n < 10; n++) {
      const p = await page(1, cursor);
      expect(p.queries).toBeLessThanOrEqual(12);
      ids.push(...p.ids);
      cursor = p.cursor;
      if (!cursor) break;
    }
    expect(cursor).toBeNull();
    expect(ids).toEqual(shown);
  });

  it('a request that reaches the scan bound ends its page there with a cursor; following it finds the rest once each', async () => {
    const viewer = { sub: 'lead-eli', tenant: 'quillfeather' };
    const first = await listApprovalPage(t.db, viewer, { status: 'pending', limit: 50, after: null, scanBound: 100 });
    expect(first!.approvals).toEqual([]);
    expect(first!.nextCursor).not.toBeNull();
    const ids: string[] = [];
    let cursor = first!.nextCursor;
    for (let n = 0; cursor && n < 10; n++) {
      const after = Buffer.from(cursor, 'base64url').toString('utf8').slice('a1:'.length);
      const next = await listApprovalPage(t.db, viewer, { status: 'pending', limit: 50, after, scanBound: 100 });
      ids.push(...next!.approvals.map((a) => a.approvalId));
      cursor = next!.nextCursor;
    }
    expect(cursor).toBeNull();
    expect(ids).toEqual(shown);
  });
});
