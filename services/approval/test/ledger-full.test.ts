import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { signUserToken } from '@gatehouse/credentials';
import { createDb, isConnectionFault, type Db } from '@gatehouse/ledger';
import { closeServer, listen } from '@gatehouse/platform';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// A Postgres that refuses a new connection because it has too many (SQLSTATE 53300: "sorry, too
// many clients already", or a role's or database's connection limit) ran nothing: it is the
// ledger being unavailable, like a refused or reset connection. An approver deciding then was
// answered 500 `internal` (seen on a machine whose shared Postgres was full); the answer is 503
// `dependency_unavailable` with Retry-After, and nothing is decided (docs/decisions/0737).

let t: TestDatabase;
/** A login role that may hold no connection at all: every connection it opens is refused with 53300. */
const role = `gh_full_${randomBytes(4).toString('hex')}`;
let full: Db;
let server: Server;
let url: string;

beforeAll(async () => {
  t = await createTestDatabase();
  await sql.raw(`create role ${role} login connection limit 0`).execute(t.db);
  const asRole = new URL(t.url);
  asRole.username = role;
  asRole.password = '';
  full = createDb(asRole.toString(), 2);
  // The revocations answer from their cache, as a running service's do between two loads (1 s):
  // the decision's own transaction is the first to need a connection.
  const verifier = { secret: SECRET, revocations: { assertNotRevoked: async () => undefined } };
  const app = testApprovalApp(full, 'approval-ledger-full-test', { responseDeadlineMs: 8000, verifier });
  const l = await listen(app, 0, '127.0.0.1');
  server = l.server;
  url = `http://127.0.0.1:${l.port}`;
});
afterAll(async () => {
  if (server) await closeServer(server);
  await full?.destroy().catch(() => undefined);
  await sql.raw(`drop role if exists ${role}`).execute(t.db);
  await t?.drop();
});

/** POSTs lead-eli's approval of `a`: the status, the error reason if any, Retry-After and how long it took, ms. */
async function approve(a: SeededAction) {
  const lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  const started = Date.now();
  const r = await fetch(`${url}/v1/approvals/${a.approvalId}/decision`, {
    method: 'POST',
    headers: { authorization: `Bearer ${lead}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'approve', actionVersion: a.version, actionDigest: a.digest }),
    signal: AbortSignal.timeout(15_000),
  });
  const body = (await r.json()) as { error?: { reason: string } };
  return { status: r.status, reason: body.error?.reason, retryAfter: r.headers.get('retry-after'), ms: Date.now() - started };
}

describe('a ledger with no connection to spare (53300)', () => {
  it('is a connection fault: the real error of a refused connection', async () => {
    const err = await sql`select 1`.execute(full).then(
      () => null,
      (e: unknown) => e as { code?: string },
    );
    expect(err?.code).toBe('53300');
    expect(isConnectionFault(err)).toBe(true);
  });

  it('an approver deciding gets 503 dependency_unavailable with Retry-After at once, never 500; nothing is decided', async () => {
    const a = await createAction(t.db, { orderId: 'O-1001', amountCents: 8000, pendingApproval: {} });
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    const r = await approve(a);
    expect(r).toMatchObject({ status: 503, reason: 'dependency_unavailable', retryAfter: '5' });
    // Answered as the refusal came, not at the response deadline.
    expect(r.ms).toBeLessThan(5000);
    const row = await t.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
    expect(row.status).toBe('pending');
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
    const jobs = await t.db.selectFrom('outbox').select('payload').where('queue', 'like', '%executions%').execute();
    expect(jobs).toEqual([]);
  });
});
