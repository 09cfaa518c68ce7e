import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import request from 'supertest';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueContracts } from '@gatehouse/contracts';
import { startStack, tokenFor, type RunningStack } from '@gatehouse/cli';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, freePort, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

const SECRET = 'local-auth-secret-change-me';
const HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script> timeout';
const BASES = Object.keys(queueContracts);

let t: TestDatabase;
let prefix: string;
let stack: RunningStack;
let url: string;
let ops: string;
let rep: string;
const seeded = {
  stopped: '',
  executing: '',
  stuck: '',
  unknownKey: '',
  succeededKey: '',
  openSubject: `op:${randomUUID()}:action:1`,
  frozenSubject: `refund:rf_${randomUUID().slice(0, 8)}`,
  resolvedSubject: `order:O-${randomUUID().slice(0, 6)}`,
};

/** Seeds workflows in several states, operations, worklist items, a candidate release and a Redis-only queue. */
async function seed(): Promise<void> {
  const db = t.db;
  const a = await createAction(db, { orderId: 'O-1001', amountCents: 12_000 });
  const b = await createAction(db, { orderId: 'O-1002', tool: 'reship_order' });
  const c = await createAction(db, { orderId: 'O-1003', amountCents: 2000 });
  // A run with no progress for ten minutes, waiting for its first turn: listed as stuck.
  const d = await createAction(db, { orderId: 'O-1004', amountCents: 1000 });
  seeded.stuck = d.workflowId;
  await db
    .updateTable('workflows')
    .set({ state: 'investigating', updated_at: new Date(Date.now() - 10 * 60_000) })
    .where('id', '=', d.workflowId)
    .execute();
  seeded.stopped = a.workflowId;
  seeded.executing = c.workflowId;
  seeded.unknownKey = b.operationKey;
  seeded.succeededKey = c.operationKey;
  await db
    .updateTable('workflows')
    .set({ state: 'stopped', stop_reason: 'budget_exhausted', next_step: 'Submit a new ticket.' })
    .where('id', '=', a.workflowId)
    .execute();
  await db
    .updateTable('workflows')
    .set({ state: 'needs_reconciliation', next_step: 'On-call must run gatehouse reconcile.' })
    .where('id', '=', b.workflowId)
    .execute();
  const op = (s: typeof b, tool: string, status: 'failed_unknown' | 'succeeded', error: string | null) => ({
    key: s.operationKey,
    workflow_id: s.workflowId,
    action_id: s.actionId,
    action_digest: s.digest,
    tool,
    status,
    attempts: 2,
    error,
    release_id: 'rel-1',
  });
  await db
    .insertInto('operations')
    .values([op(b, 'reship_order', 'failed_unknown', HOSTILE), op(c, 'issue_refund', 'succeeded', null)])
    .execute();
  const item = (subject: string, cls: string, status: string, extra: Record<string, unknown> = {}) => ({
    id: randomUUID(),
    run_id: randomUUID(),
    class: cls,
    owner: 'payments-lead',
    status,
    subject,
    detail: JSON.stringify({ note: HOSTILE }),
    ...extra,
  });
  await db
    .insertInto('reconciliation_items')
    .values([
      item(seeded.openSubject, 'in_flight_ledger_lacks_it', 'open', {
        operation_key: b.operationKey,
        workflow_id: b.workflowId,
        tool: 'reship_order',
      }),
      item(seeded.frozenSubject, 'amount_mismatch', 'frozen', { order_id: 'O-1001', amount_cents: 12_345, ledger_ref: 'rf_1' }),
      item(seeded.resolvedSubject, 'shipment_count_mismatch', 'resolved', {
        resolution: 'cancelled',
        resolved_by: 'lead-eli',
        resolved_at: new Date(),
      }),
    ] as never)
    .execute();
  // A candidate release known only to the database, and a queue of a release known only to Redis.
  await db
    .insertInto('releases')
    .values({ id: 'rel-table', manifest: JSON.stringify({ id: 'rel-table' }), status: 'candidate' })
    .execute();
  const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  const q = new Queue('turns.rel-cand', { connection: redis, prefix });
  await q.add('turn', { release: 'rel-cand', workflowId: randomUUID() }, { jobId: 'cand-1' });
  // A workflow job as the relay adds it: with its tenant-fair priority (BullMQ state `prioritized`).
  await q.add('turn', { release: 'rel-cand', workflowId: randomUUID() }, { jobId: 'cand-2', priority: 3 });
  await q.close();
  redis.disconnect();
}

beforeAll(async () => {
  t = await createTestDatabase();
  prefix = testQueuePrefix();
  await seed();
  const port = await freePort();
  stack = await startStack({
    env: {
      DATABASE_URL: t.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: prefix,
      OPS_PORT: String(port),
      GATEHOUSE_ENV: 'test',
      LOG_LEVEL: 'warn',
      // Discovery's Redis part is bounded (2 s) and skipped when Redis is slow, as on a loaded
      // machine at boot: the next pass comes soon, and the tests start once it found the queue.
      OPS_QUEUE_DISCOVERY_MS: '500',
    },
    dir: mkdtempSync(resolve(tmpdir(), 'gh-ops-')),
    only: ['ops'],
  });
  url = `http://127.0.0.1:${port}`;
  ops = await tokenFor('ops-gus', SECRET);
  rep = await tokenFor('rep-ana', SECRET);
  await vi.waitFor(
    async () => {
      const res = await request(url).get('/api/queues').set('authorization', `Bearer ${ops}`);
      const cand = (res.body.queues as Array<{ name: string; counts: unknown }> | undefined)?.find((q) => q.name === 'turns.rel-cand');
      expect(cand?.counts).toBeTruthy();
    },
    { timeout: 60_000, interval: 250 },
  );
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  if (prefix) await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

const PROTECTED = [
  '/ops',
  '/api/overview',
  '/api/workflows',
  '/api/workflows/stuck',
  '/api/operations/failed-unknown',
  '/api/reconciliation/worklist',
  '/api/queues',
  '/queues',
  '/queues/api/queues',
];

describe('ops dashboard: operator token required', () => {
  it('refuses every page and API without a token (401): pages show the sign-in form, APIs answer JSON', async () => {
    for (const path of PROTECTED) {
      const res = await request(url).get(path);
      expect(res.status, path).toBe(401);
    }
    const page = await request(url).get('/ops');
    expect(page.type).toBe('text/html');
    expect(page.text).toContain('action="/session"');
    const api = await request(url).get('/api/overview');
    expect(api.body.error.reason).toBe('missing_token');
    const bad = await request(url).get('/api/overview').set('authorization', 'Bearer not.a.jwt');
    expect(bad.status).toBe(401);
    expect(bad.body.error.reason).toBe('invalid_token');
    const forged = await request(url).get('/ops').set('cookie', 'gh_ops=forged');
    expect(forged.status).toBe(401);
  });

  it('refuses a valid token of every other role (403) and audits the refusal', async () => {
    for (const user of ['rep-ana', 'lead-eli', 'pol-hal']) {
      const token = await tokenFor(user, SECRET);
      for (const path of PROTECTED) {
        const res = await request(url).get(path).set('authorization', `Bearer ${token}`);
        expect(res.status, `${user} ${path}`).toBe(403);
      }
    }
    const page = await request(url).get('/ops').set('authorization', `Bearer ${rep}`);
    expect(page.text).toContain('is not an operator');
    const refusals = await t.db.selectFrom('audit_outbox').select('event').execute();
    const ours = refusals.map((r) => r.event).filter((e) => e.type === 'ops.refused' && e.service === 'ops');
    expect(ours.length).toBeGreaterThanOrEqual(3 * PROTECTED.length);
    expect(ours.every((e) => e.outcome === 'dashboard:not_an_operator' && typeof e.actorHash === 'string')).toBe(true);
  });

  it('admits ops-gus with a bearer token', async () => {
    for (const path of PROTECTED) {
      const res = await request(url).get(path).set('authorization', `Bearer ${ops}`);
      expect(res.status, path).toBe(200);
    }
  });

  it('browser sign-in: a non-operator gets 403 and no cookie; the operator gets an HttpOnly, SameSite=Strict session', async () => {
    const signIn = await request(url).get('/signin');
    expect(signIn.status).toBe(200);
    expect(signIn.text).toContain('ops-gus (operator)');
    const refused = await request(url).post('/session').type('form').send({ userId: 'rep-ana' });
    expect(refused.status).toBe(403);
    expect(refused.headers['set-cookie']).toBeUndefined();
    const unknown = await request(url).post('/session').type('form').send({ userId: 'nobody' });
    expect(unknown.status).toBe(401);
    const ok = await request(url).post('/session').type('form').send({ userId: 'ops-gus' });
    expect(ok.status).toBe(303);
    expect(ok.headers.location).toBe('/ops');
    const cookie = String(ok.headers['set-cookie']);
    expect(cookie).toMatch(/^gh_ops=[^;]+; Max-Age=3600; Path=\/; HttpOnly; SameSite=Strict$/);
    const session = cookie.split(';')[0]!;
    const page = await request(url).get('/ops').set('cookie', session);
    expect(page.status).toBe(200);
    expect(page.text).toContain('signed in as ops-gus');
    expect(page.headers['content-security-policy']).toContain("default-src 'none'");
    expect((await request(url).get('/queues').set('cookie', session)).status).toBe(200);
    const out = await request(url).get('/signout').set('cookie', session);
    expect(out.status).toBe(303);
    expect(String(out.headers['set-cookie'])).toMatch(/^gh_ops=; Max-Age=0/);
  });
});

describe('bull-board over every queue of every release', () => {
  it('lists each queue of rel-1 (manifest), rel-table (releases table only: no manifest) and turns.rel-cand (found in Redis)', async () => {
    const res = await request(url).get('/queues/api/queues').set('authorization', `Bearer ${ops}`);
    expect(res.status).toBe(200);
    const queues = res.body.queues as Array<{ name: string; readOnlyMode: boolean; counts: Record<string, number> }>;
    const names = queues.map((q) => q.name);
    for (const base of BASES) {
      expect(names).toContain(`${base}.rel-1`);
      expect(names).toContain(`${base}.rel-table`);
    }
    expect(names).toContain('turns.rel-cand');
    expect(queues.every((q) => q.readOnlyMode)).toBe(true);
    expect(queues.find((q) => q.name === 'turns.rel-cand')!.counts.waiting).toBe(1);
    const ui = await request(url).get('/queues').set('authorization', `Bearer ${ops}`);
    expect(ui.type).toBe('text/html');
    expect(ui.text).toContain('Gatehouse queues');
  });

  it('is read-only: bull-board write routes are refused (405), the job stays queued', async () => {
    for (const [method, path] of [
      ['put', '/queues/api/queues/turns.rel-cand/pause'],
      ['put', '/queues/api/queues/turns.rel-cand/empty'],
      ['post', '/queues/api/queues/turns.rel-cand/add'],
    ] as const) {
      const res = await request(url)[method](path).set('authorization', `Bearer ${ops}`).send({});
      expect(res.status, path).toBe(405);
    }
    const res = await request(url).get('/api/queues').set('authorization', `Bearer ${ops}`);
    const cand = (res.body.queues as Array<{ name: string; sources: string[]; counts: Record<string, number> }>).find(
      (q) => q.name === 'turns.rel-cand',
    );
    // The overview counts a prioritized job as waiting (ADR 0500): without that it would show 1.
    expect(cand).toMatchObject({ sources: ['redis'], counts: { waiting: 2 } });
  });
});

describe('pages and JSON: workflows by state, failed_unknown operations, the worklist', () => {
  it('the JSON variants return exactly the seeded rows', async () => {
    const auth = { authorization: `Bearer ${ops}` };
    const wf = await request(url).get('/api/workflows').set(auth);
    expect(wf.body.counts).toMatchObject({ stopped: 1, needs_reconciliation: 1, executing: 1, completed: 0 });
    const stopped = await request(url).get('/api/workflows?state=stopped').set(auth);
    expect(stopped.body.recent).toEqual([
      expect.objectContaining({ id: seeded.stopped, state: 'stopped', stopReason: 'budget_exhausted', nextStep: 'Submit a new ticket.' }),
    ]);
    expect((await request(url).get('/api/workflows?state=nonsense').set(auth)).status).toBe(400);
    const unknown = await request(url).get('/api/operations/failed-unknown').set(auth);
    expect(unknown.body.operations).toEqual([
      expect.objectContaining({
        key: seeded.unknownKey,
        tool: 'reship_order',
        attempts: 2,
        error: HOSTILE,
        workflowState: 'needs_reconciliation',
      }),
    ]);
    const worklist = await request(url).get('/api/reconciliation/worklist').set(auth);
    expect(worklist.body.available).toBe(true);
    expect(worklist.body.items.map((i: { subject: string }) => i.subject).sort()).toEqual(
      [seeded.frozenSubject, seeded.openSubject].sort(),
    );
    expect(worklist.body.items.find((i: { status: string }) => i.status === 'frozen')).toMatchObject({
      amountCents: 12_345,
      class: 'amount_mismatch',
    });
  });

  it('refuses a state filter on the lists it does not filter (400 naming what they take), never ignores it', async () => {
    const auth = { authorization: `Bearer ${ops}` };
    for (const path of ['/api/workflows/stuck', '/api/operations/failed-unknown', '/api/reconciliation/worklist']) {
      const r = await request(url).get(`${path}?state=stopped`).set(auth);
      expect(r.status, path).toBe(400);
      expect(r.body.error.reason, path).toBe('unknown_query_parameter');
      expect(r.body.error.message, path).toMatch(/it takes limit$/);
      const bad = await request(url).get(`${path}?limit=0`).set(auth);
      expect([bad.status, bad.body.error.reason, bad.body.error.message], path).toEqual([
        400,
        'invalid_query',
        'limit must be an integer 1..500',
      ]);
      expect((await request(url).get(`${path}?limit=5`).set(auth)).status, path).toBe(200);
    }
  });

  it('lists the run with no progress past its bound: state, age, the job it waits for, no re-drive yet', async () => {
    const auth = { authorization: `Bearer ${ops}` };
    const res = await request(url).get('/api/workflows/stuck').set(auth);
    expect(res.status).toBe(200);
    expect(res.body.runs).toEqual([
      expect.objectContaining({
        workflowId: seeded.stuck,
        state: 'investigating',
        waitingFor: [`turn_${seeded.stuck}_r1`],
        watchdog: null,
      }),
    ]);
    expect(res.body.runs[0].ageMs).toBeGreaterThan(res.body.runs[0].boundMs);
    const overview = await request(url).get('/api/overview').set(auth);
    expect(overview.body.stuck.map((r: { workflowId: string }) => r.workflowId)).toEqual([seeded.stuck]);
    const html = (await request(url).get('/ops').set(auth)).text;
    expect(html).toContain('id="stuck"');
    expect(html).toContain(`turn_${seeded.stuck}_r1`);
  });

  it('the HTML page lists them, escaped (no markup from stored text reaches the page)', async () => {
    const res = await request(url).get('/ops').set('authorization', `Bearer ${ops}`);
    expect(res.status).toBe(200);
    const html = res.text;
    for (const text of [
      seeded.stopped,
      seeded.executing,
      'budget_exhausted',
      'Submit a new ticket.',
      seeded.unknownKey,
      seeded.openSubject,
      seeded.frozenSubject,
      '123.45',
      'turns.rel-cand',
    ])
      expect(html, text).toContain(text);
    expect(html).not.toContain(seeded.succeededKey);
    expect(html).not.toContain(seeded.resolvedSubject);
    expect(html).not.toMatch(/<img|<script/i);
    expect(html).toContain('&#60;img src=x onerror=&#34;alert(1)&#34;&#62;');
    const filtered = await request(url).get('/ops?state=stopped').set('authorization', `Bearer ${ops}`);
    expect(filtered.text).toContain(seeded.stopped);
    expect(filtered.text).not.toContain(`<td>${seeded.executing}</td>`);
  });
});
