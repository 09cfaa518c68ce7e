import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import type { Express } from 'express';
import { signUserToken } from '@gatehouse/credentials';
import { createDb, type OutboxRow } from '@gatehouse/ledger';
import { createLogger, type OutboxRelay } from '@gatehouse/platform';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, lockWaiters, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// An approver whose decision was recorded but whose answer was lost retries the same request:
// the retry is answered what the first was (200, `replayed: true`), and nothing is written again
// — no second `approval.decided`, no second job, the approval row untouched (ADR 0726). Anything
// else on a decided approval — another approver, the other decision, another digest, version or
// reason, an approval voided or expired since — keeps its refusal. The old code answered every
// retry 410 `already_<status>`.
let t: TestDatabase;
let app: Express;
let eli: string;
let fay: string;
const published: OutboxRow[] = [];
/** A relay that records what the router hands it (a decision's jobs; none for a replay). */
const relay = { publish: async (rows: OutboxRow[]) => void published.push(...rows) } as unknown as OutboxRelay;

beforeAll(async () => {
  t = await createTestDatabase();
  const log = createLogger('approval-replay-test');
  log.level = 'silent';
  app = testApprovalApp(t.db, log, { relay });
  eli = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  fay = await signUserToken({ sub: 'lead-fay', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
});
afterAll(async () => {
  await t?.drop();
});

/** A run waiting on a pending approval of a 60.00 refund (R7) on O-1002, expiring in 15 minutes. */
const pendingApproval = (): Promise<SeededAction> => createAction(t.db, { orderId: 'O-1002', amountCents: 6000, pendingApproval: {} });

type Body = { decision: 'approve' | 'deny'; actionVersion: number; actionDigest: string; reason?: string };
const bodyOf = (a: SeededAction, decision: Body['decision'], extra: Partial<Body> = {}): Body => ({
  decision,
  actionVersion: a.version,
  actionDigest: a.digest,
  ...extra,
});
const decide = (a: SeededAction, token: string, body: Body) =>
  request(app).post(`/v1/approvals/${a.approvalId}/decision`).set('authorization', `Bearer ${token}`).send(body);

/**
 * Everything a decision writes about `a`: its approval and action rows, its run's deadline and
 * state, its run's events, the approval's audit events by type, and the jobs written to the
 * outbox — compared before and after a retry to show the retry wrote nothing.
 */
async function written(a: SeededAction) {
  const approval = await t.db.selectFrom('approvals').selectAll().where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
  const action = await t.db.selectFrom('actions').select(['status']).where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const run = await t.db.selectFrom('workflows').selectAll().where('id', '=', a.workflowId).executeTakeFirstOrThrow();
  const events = await t.db.selectFrom('workflow_events').select('seq').where('workflow_id', '=', a.workflowId).execute();
  const audits = await t.db
    .selectFrom('audit_outbox')
    .select(sql<string>`event->>'type'`.as('type'))
    .where(sql`event->>'approvalId'`, '=', a.approvalId!)
    .orderBy('id')
    .execute();
  const jobs = await t.db
    .selectFrom('outbox')
    .select('job_id')
    .where(sql`payload->>'workflowId'`, '=', a.workflowId)
    .execute();
  return { approval, action, run, events: events.length, audits: audits.map((r) => r.type), jobs: jobs.length };
}

describe('a decision retried by the same approver after its answer was lost', () => {
  it('approve, then the same request twice more: 200 approved, replayed; one decision, one audit event, one job', async () => {
    const a = await pendingApproval();
    const first = await decide(a, eli, bodyOf(a, 'approve', { reason: 'checked the order' }));
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toEqual({ approvalId: a.approvalId, status: 'approved' });
    const after = await written(a);
    expect(after.audits).toEqual(['approval.decided']);
    expect(after.jobs).toBe(1);
    const publishedBefore = published.length;
    for (let i = 0; i < 2; i++) {
      const retry = await decide(a, eli, bodyOf(a, 'approve', { reason: 'checked the order' }));
      expect(retry.status, JSON.stringify(retry.body)).toBe(200);
      expect(retry.body).toEqual({ approvalId: a.approvalId, status: 'approved', replayed: true });
    }
    expect(await written(a)).toEqual(after);
    expect(published.length).toBe(publishedBefore);
  });

  it('deny, then the same request: 200 denied, replayed; the call is answered once', async () => {
    const a = await pendingApproval();
    expect((await decide(a, eli, bodyOf(a, 'deny'))).body).toEqual({ approvalId: a.approvalId, status: 'denied' });
    const after = await written(a);
    expect(after.jobs).toBe(1);
    const retry = await decide(a, eli, bodyOf(a, 'deny'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body).toEqual({ approvalId: a.approvalId, status: 'denied', replayed: true });
    expect(await written(a)).toEqual(after);
  });

  it('an approval its execution already consumed (used): the approve is replayed, nothing written', async () => {
    const a = await pendingApproval();
    expect((await decide(a, eli, bodyOf(a, 'approve'))).status).toBe(200);
    await t.db.updateTable('approvals').set({ status: 'used', used_at: new Date() }).where('id', '=', a.approvalId!).execute();
    await t.db.updateTable('workflows').set({ state: 'completed' }).where('id', '=', a.workflowId).execute();
    const after = await written(a);
    const retry = await decide(a, eli, bodyOf(a, 'approve'));
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body).toEqual({ approvalId: a.approvalId, status: 'approved', replayed: true });
    expect(await written(a)).toEqual(after);
  });
});

describe('anything but the same request on a decided approval keeps its refusal, and decides nothing', () => {
  /** `a` decided by lead-eli with `decision` (reason "ok"), then `change` applied; returns the state to compare. */
  async function decidedThen(decision: Body['decision'], change: (a: SeededAction) => Promise<unknown> = async () => undefined) {
    const a = await pendingApproval();
    expect((await decide(a, eli, bodyOf(a, decision, { reason: 'ok' }))).status).toBe(200);
    await change(a);
    return { a, before: await written(a) };
  }

  /** The refusal `body` by `token` gets; asserts nothing but one `approval.refused` audit event was written. */
  async function refusedWithNothingWritten(a: SeededAction, before: Awaited<ReturnType<typeof written>>, token: string, body: Body) {
    const res = await decide(a, token, body);
    const now = await written(a);
    expect(now).toEqual({ ...before, audits: [...before.audits, 'approval.refused'] });
    return `${res.status}:${res.body.error?.reason}`;
  }

  it('another approver, the other decision, another reason, version or digest', async () => {
    const { a, before } = await decidedThen('approve');
    expect(await refusedWithNothingWritten(a, before, fay, bodyOf(a, 'approve', { reason: 'ok' }))).toBe('410:already_approved');
    const b = await written(a);
    expect(await refusedWithNothingWritten(a, b, eli, bodyOf(a, 'deny', { reason: 'ok' }))).toBe('410:already_approved');
    const c = await written(a);
    expect(await refusedWithNothingWritten(a, c, eli, bodyOf(a, 'approve', { reason: 'other words' }))).toBe('410:already_approved');
    const d = await written(a);
    expect(await refusedWithNothingWritten(a, d, eli, bodyOf(a, 'approve'))).toBe('410:already_approved');
    const e = await written(a);
    expect(await refusedWithNothingWritten(a, e, eli, bodyOf(a, 'approve', { reason: 'ok', actionDigest: 'b'.repeat(64) }))).toBe(
      '409:digest_mismatch',
    );
    const f = await written(a);
    expect(await refusedWithNothingWritten(a, f, eli, bodyOf(a, 'approve', { reason: 'ok', actionVersion: a.version + 1 }))).toBe(
      '409:stale_version',
    );
  });

  it('an approval voided since (its action superseded by a follow-up): 409 stale_version', async () => {
    const { a, before } = await decidedThen('approve', async (s) => {
      await t.db.updateTable('actions').set({ status: 'superseded' }).where('id', '=', s.actionId).execute();
      await t.db.updateTable('approvals').set({ status: 'void' }).where('id', '=', s.approvalId!).execute();
    });
    expect(await refusedWithNothingWritten(a, before, eli, bodyOf(a, 'approve', { reason: 'ok' }))).toBe('409:stale_version');
  });

  it('an approved approval past its expiry, unused — swept or not yet: its refusal as before', async () => {
    const past = (s: SeededAction) =>
      t.db
        .updateTable('approvals')
        .set({ expires_at: new Date(Date.now() - 1000) })
        .where('id', '=', s.approvalId!)
        .execute();
    const unswept = await decidedThen('approve', past);
    expect(await refusedWithNothingWritten(unswept.a, unswept.before, eli, bodyOf(unswept.a, 'approve', { reason: 'ok' }))).toBe(
      '410:already_approved',
    );
    const swept = await decidedThen('approve', async (s) => {
      await past(s);
      await t.db.updateTable('approvals').set({ status: 'expired' }).where('id', '=', s.approvalId!).execute();
    });
    expect(await refusedWithNothingWritten(swept.a, swept.before, eli, bodyOf(swept.a, 'approve', { reason: 'ok' }))).toBe('410:expired');
  });

  it('an approval that expired before anyone decided it: 410 expired, nothing decided', async () => {
    const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 6000, pendingApproval: { expiresInMs: -1000 } });
    const before = await written(a);
    expect(await refusedWithNothingWritten(a, before, eli, bodyOf(a, 'approve'))).toBe('410:expired');
  });
});

describe('two identical decisions at once', () => {
  it('both wait on the action, then: one decision, both answered approved, one of them replayed (× 8)', async () => {
    const holder = createDb(t.url, 1);
    try {
      for (let round = 0; round < 8; round++) {
        const a = await pendingApproval();
        const publishedBefore = published.length;
        const answers = await holder.connection().execute(async (conn) => {
          // The barrier: both requests read the approval pending, then queue on the action's lock.
          await sql`begin`.execute(conn);
          await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
          const both = Promise.all([decide(a, eli, bodyOf(a, 'approve')), decide(a, eli, bodyOf(a, 'approve'))]);
          expect(await lockWaiters(t.db, 2)).toBe(true);
          await sql`commit`.execute(conn);
          return both;
        });
        for (const r of answers) expect(r.status, JSON.stringify(r.body)).toBe(200);
        const bodies = answers.map((r) => r.body as { status: string; replayed?: boolean });
        expect(bodies.map((b) => b.status)).toEqual(['approved', 'approved']);
        expect(bodies.filter((b) => b.replayed === true)).toHaveLength(1);
        const now = await written(a);
        expect(now.audits).toEqual(['approval.decided']);
        expect(now.jobs).toBe(1);
        expect(now.approval).toMatchObject({ status: 'approved', approver: 'lead-eli' });
        expect(published.length - publishedBefore).toBe(1);
      }
    } finally {
      await holder.destroy();
    }
  });
});

describe('the inbox form sent again', () => {
  it('is answered as the first was (303 to the confirmation), and records nothing more', async () => {
    const a = await pendingApproval();
    const agent = request.agent(app);
    expect((await agent.post('/inbox/session').type('form').send({ token: eli })).status).toBe(303);
    const inbox = await agent.get('/inbox/approvals');
    const csrf = /name="csrf" value="([0-9a-f]+)"/.exec(inbox.text)?.[1];
    expect(csrf, inbox.text).toBeDefined();
    const form = { csrf, decision: 'approve', actionVersion: String(a.version), actionDigest: a.digest, reason: '' };
    const send = () => agent.post(`/inbox/approvals/${a.approvalId}/decision`).type('form').send(form);
    const first = await send();
    expect(first.status, first.text).toBe(303);
    expect(first.headers.location).toBe(`/inbox/approvals?done=approved&version=${a.version}`);
    const after = await written(a);
    const again = await send();
    expect(again.status, again.text).toBe(303);
    expect(again.headers.location).toBe(first.headers.location);
    expect(await written(a)).toEqual(after);
  });
});
