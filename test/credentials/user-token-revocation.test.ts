import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { createIntakeApp, WorkflowEventHub } from '@gatehouse/agent-loop';
import { createApprovalApp } from '@gatehouse/approval';
import { createOpsApp, createQueueBoard } from '@gatehouse/ops';
import { authorizeOperator, OperatorRefused, revokeUserTokens, type OpsUsageError } from '@gatehouse/operations';
import { actorHash, createDb, DependencyUnavailable } from '@gatehouse/ledger';
import {
  closeServer,
  createLogger,
  listen,
  QueueRegistry,
  TokenRevocationCache,
  type BearerVerifier,
  type OutboxRelay,
} from '@gatehouse/platform';
import { TokenRevokedError, type VerifiedUserClaims } from '@gatehouse/credentials';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, freePort, TEST_REDIS_URL, testQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';

/**
 * User bearer tokens can be revoked (docs/decisions/0695-user-tokens-can-be-revoked.md): an
 * operator revokes every token of a subject issued before now, or one token by its `jti`; each
 * service that takes user tokens (intake, approval API and inbox, ops dashboard and API, the ops
 * CLI) refuses a revoked one with 401 `token_revoked` and does nothing downstream; open event
 * streams of the subject close with `stream.closed` `token_revoked`; an approval decision is
 * refused in its own transaction even when the service's cache has not seen the revocation yet.
 * Real Postgres (a database of its own), real HTTP through each service's own app.
 */
const SECRET = 'local-auth-secret-change-me';
const HMAC = 'user-token-revocation-test-hmac-key';
const log = createLogger('user-token-revocation-test', { write: () => true } as never);
const relay = { publish: async () => undefined } as unknown as OutboxRelay;
/** Every request reads the ledger's revocations (bound 0): "the next request" is exact here; the bound itself is tested below. */
const fresh: BearerVerifier = { secret: SECRET, revocationCacheMs: 0 };

let t: TestDatabase;
let redis: Redis;
let queues: QueueRegistry;
const servers: Server[] = [];
let intakeUrl = '';
let intake: ReturnType<typeof createIntakeApp>;
let approval: ReturnType<typeof createApprovalApp>;
/** The approval app with a long cache bound (10 s): the decision's own check is what refuses. */
let approvalStaleCache: ReturnType<typeof createApprovalApp>;
let ops: ReturnType<typeof createOpsApp>;

const by = { operator: 'ops-gus', service: 'cli' as const };
const revoke = (subject: string, jti?: string) =>
  revokeUserTokens(t.db, { subject, reason: 'left the company', ...(jti ? { jti } : {}) }, by, HMAC);

/** The claims of a token this test minted (no signature check: the test's own token). */
function claimsOf(token: string): { iat: number; jti: string } {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { iat: number; jti: string };
}

/** Waits until the clock reaches `iso` (a subject's not-before): a token minted then is issued at or after it. */
async function after(iso: string): Promise<void> {
  const ms = Date.parse(iso) - Date.now();
  if (ms > 0) await new Promise((r) => setTimeout(r, ms + 5));
}

async function pendingApproval(orderId: string): Promise<SeededAction> {
  return createAction(t.db, { orderId, amountCents: 8000, pendingApproval: {} });
}

/** What a decision left downstream: the approval's status and approver, the action's status, and the execution jobs in the outbox. */
async function downstreamOf(a: SeededAction) {
  const approvalRow = await t.db
    .selectFrom('approvals')
    .select(['status', 'approver'])
    .where('id', '=', a.approvalId!)
    .executeTakeFirstOrThrow();
  const action = await t.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from outbox
    where queue like 'executions%' and payload->>'approvalId' = ${a.approvalId!}`.execute(t.db);
  return { approval: approvalRow, action: action.status, executionJobs: rows[0]!.n };
}

const decide = (app: typeof approval, token: string, a: SeededAction) =>
  request(app)
    .post(`/v1/approvals/${a.approvalId}/decision`)
    .set('authorization', `Bearer ${token}`)
    .send({ decision: 'approve', actionVersion: a.version, actionDigest: a.digest });

beforeAll(async () => {
  t = await createTestDatabase();
  redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  queues = new QueueRegistry(redis, testQueuePrefix());
  const common = { db: t.db, relay, auditHmacKey: HMAC, log };
  intake = createIntakeApp({
    ...common,
    verifier: fresh,
    release: 'rel-1',
    packs: () => {
      throw new Error('not reached: a revoked caller never gets to the ticket');
    },
    events: { hub: new WorkflowEventHub(t.url, log), pollMs: 200, heartbeatMs: 15_000 },
  });
  const l = await listen(intake, 0, '127.0.0.1');
  servers.push(l.server);
  intakeUrl = `http://127.0.0.1:${l.port}`;
  approval = createApprovalApp({ ...common, verifier: fresh, localSecret: null, secureCookie: false });
  approvalStaleCache = createApprovalApp({
    ...common,
    verifier: { secret: SECRET, revocationCacheMs: 10_000 },
    localSecret: null,
    secureCookie: false,
  });
  ops = createOpsApp({
    db: t.db,
    log,
    board: createQueueBoard({ db: t.db, redis, queues }),
    verifier: fresh,
    auditHmacKey: HMAC,
    localSecret: null,
    secureCookie: false,
  });
});
afterAll(async () => {
  for (const s of servers) await closeServer(s).catch(() => undefined);
  await queues?.close();
  redis?.disconnect();
  await t?.drop();
});

describe('approval API: a revoked approver cannot approve', () => {
  it('refuses the revoked lead’s token with 401 token_revoked: no approval decided, no execution job; a token issued after the revocation approves', async () => {
    const a = await pendingApproval('O-REVOKE-1');
    const old = await tokenFor('lead-eli', SECRET);
    expect((await request(approval).get('/v1/approvals').set('authorization', `Bearer ${old}`)).status).toBe(200);
    const r = await revoke('lead-eli');
    expect(r).toMatchObject({ kind: 'subject', subject: 'lead-eli', changed: true });

    const refused = await decide(approval, old, a);
    expect(refused.status).toBe(401);
    expect(refused.body.error.reason).toBe('token_revoked');
    expect((await request(approval).get('/v1/approvals').set('authorization', `Bearer ${old}`)).body.error.reason).toBe('token_revoked');
    expect(await downstreamOf(a)).toEqual({
      approval: { status: 'pending', approver: null },
      action: 'pending_approval',
      executionJobs: 0,
    });

    await after(r.notBefore!);
    const renewed = await tokenFor('lead-eli', SECRET);
    const ok = await decide(approval, renewed, a);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(await downstreamOf(a)).toEqual({ approval: { status: 'approved', approver: 'lead-eli' }, action: 'approved', executionJobs: 1 });
  });

  it('refuses the decision in its own transaction even while the service’s cache has not seen the revocation (×5)', async () => {
    let last = new Date(Date.now() + 1000).toISOString(); // past the revocations of the test before
    for (let i = 0; i < 5; i++) {
      const a = await pendingApproval(`O-REVOKE-STALE-${i}`);
      await after(last); // a token that is valid until this iteration's revocation
      const old = await tokenFor('lead-eli', SECRET);
      // The cache (10 s bound) loads now, before the revocation: it will not see it for 10 s.
      expect((await request(approvalStaleCache).get('/v1/approvals').set('authorization', `Bearer ${old}`)).status).toBe(200);
      last = (await revoke('lead-eli')).notBefore!;
      expect((await request(approvalStaleCache).get('/v1/approvals').set('authorization', `Bearer ${old}`)).status).toBe(200);
      const refused = await decide(approvalStaleCache, old, a);
      expect([refused.status, refused.body.error?.reason]).toEqual([401, 'token_revoked']);
      expect(await downstreamOf(a)).toEqual({
        approval: { status: 'pending', approver: null },
        action: 'pending_approval',
        executionJobs: 0,
      });
      // Refused by the decision itself: audited as a refused decision.
      const refusal = await sql<{ n: number }>`select count(*)::int as n from audit_outbox
        where event->>'type' = 'approval.refused' and event->>'approvalId' = ${a.approvalId!} and event->>'outcome' = 'token_revoked'`.execute(
        t.db,
      );
      expect(refusal.rows[0]!.n).toBe(1);
    }
  });

  it('the approver inbox signs a revoked session out: its decision form is refused, nothing decided', async () => {
    const a = await pendingApproval('O-REVOKE-INBOX');
    const old = await tokenFor('lead-eli', SECRET);
    await revoke('lead-eli');
    const page = await request(approval).get('/inbox/approvals').set('cookie', `gh_inbox=${old}`);
    expect(page.status).not.toBe(200);
    const post = await request(approval)
      .post(`/inbox/approvals/${a.approvalId}/decision`)
      .set('cookie', `gh_inbox=${old}`)
      .type('form')
      .send({ csrf: 'x', decision: 'approve', actionVersion: String(a.version), actionDigest: a.digest });
    expect(post.status).toBe(401);
    expect(await downstreamOf(a)).toEqual({
      approval: { status: 'pending', approver: null },
      action: 'pending_approval',
      executionJobs: 0,
    });
  });
});

describe('a jti revocation refuses only that token', () => {
  it('the revoked token is 401 token_revoked; another token of the same user, issued before, still works; a repeat changes nothing', async () => {
    const a = await pendingApproval('O-REVOKE-JTI');
    await after(new Date(Date.now() + 1000).toISOString()); // past the earlier subject revocations of lead-eli
    const leaked = await tokenFor('lead-eli', SECRET);
    const other = await tokenFor('lead-eli', SECRET);
    const r = await revoke('lead-eli', claimsOf(leaked).jti);
    expect(r).toMatchObject({ kind: 'jti', jti: claimsOf(leaked).jti, changed: true });
    expect(await revoke('lead-eli', claimsOf(leaked).jti)).toMatchObject({ kind: 'jti', changed: false });
    const refused = await decide(approval, leaked, a);
    expect([refused.status, refused.body.error?.reason]).toEqual([401, 'token_revoked']);
    expect(await downstreamOf(a)).toMatchObject({ approval: { status: 'pending' }, executionJobs: 0 });
    const list = await request(approval).get('/v1/approvals').set('authorization', `Bearer ${leaked}`);
    expect([list.status, list.body.error?.reason]).toEqual([401, 'token_revoked']);
    expect((await request(approval).get('/v1/approvals').set('authorization', `Bearer ${other}`)).status).toBe(200);
    expect((await decide(approval, other, a)).status).toBe(200);
  });
});

describe('intake (agent-loop): a revoked representative', () => {
  it('cannot submit a ticket or read a run: 401 token_revoked, no workflow written; a token issued after works', async () => {
    const own = await createAction(t.db, { orderId: 'O-REVOKE-INTAKE', userId: 'rep-ana' });
    const old = await tokenFor('rep-ana', SECRET);
    expect((await request(intake).get(`/v1/workflows/${own.workflowId}`).set('authorization', `Bearer ${old}`)).status).toBe(200);
    const r = await revoke('rep-ana');
    const before = await t.db
      .selectFrom('workflows')
      .select(sql<number>`count(*)::int`.as('n'))
      .executeTakeFirstOrThrow();
    const ticket = await request(intake)
      .post('/v1/tickets')
      .set('authorization', `Bearer ${old}`)
      .send({ ticketId: 'T-REVOKED-1', text: 'refund order O-1001' });
    expect([ticket.status, ticket.body.error?.reason]).toEqual([401, 'token_revoked']);
    const afterCount = await t.db
      .selectFrom('workflows')
      .select(sql<number>`count(*)::int`.as('n'))
      .executeTakeFirstOrThrow();
    expect(afterCount.n).toBe(before.n);
    const read = await request(intake).get(`/v1/workflows/${own.workflowId}`).set('authorization', `Bearer ${old}`);
    expect([read.status, read.body.error?.reason]).toEqual([401, 'token_revoked']);
    await after(r.notBefore!);
    const renewed = await tokenFor('rep-ana', SECRET);
    expect((await request(intake).get(`/v1/workflows/${own.workflowId}`).set('authorization', `Bearer ${renewed}`)).status).toBe(200);
  });

  it('an open event stream of the subject ends with stream.closed token_revoked', async () => {
    await after(new Date(Date.now() + 1000).toISOString());
    const own = await createAction(t.db, { orderId: 'O-REVOKE-STREAM', userId: 'rep-ana' });
    const token = await tokenFor('rep-ana', SECRET);
    const res = await fetch(`${intakeUrl}/v1/workflows/${own.workflowId}/events`, {
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(10_000),
    });
    expect(res.status).toBe(200);
    await revoke('rep-ana');
    // The body ends only when the server ends the stream; without the check it never does (aborted: the test fails).
    const body = await res.text();
    expect(body.endsWith('event: stream.closed\ndata: {"reason":"token_revoked"}\n\n')).toBe(true);
  }, 20_000);
});

describe('ops: dashboard API and CLI', () => {
  it('POST /api/token-revocations revokes, audited with the operator and the subject hashed; the revoked operator is then refused by the API and the CLI', async () => {
    const gus = await tokenFor('ops-gus', SECRET);
    const res = await request(ops)
      .post('/api/token-revocations')
      .set('authorization', `Bearer ${gus}`)
      .send({ subject: 'ops-gus', reason: 'token pasted in a ticket' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ kind: 'subject', subject: 'ops-gus', changed: true, jti: null });
    const { rows } = await sql<{ event: Record<string, unknown> }>`select event from audit_outbox
      where event->>'type' = 'user_tokens.revoked' and event->>'service' = 'ops'`.execute(t.db);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.event.actorHash).toBe(actorHash(HMAC, 'ops-gus'));
    expect(String(rows[0]!.event.outcome)).toMatch(/^subject:[0-9a-f]+;not_before:\d+;changed:true;reason:token pasted in a ticket$/);
    expect(String(rows[0]!.event.outcome)).not.toContain('ops-gus');

    const overview = await request(ops).get('/api/overview').set('authorization', `Bearer ${gus}`);
    expect([overview.status, overview.body.error?.reason]).toEqual([401, 'token_revoked']);
    const cli = await authorizeOperator(t.db, gus, { verifier: { secret: SECRET }, hmacKey: HMAC, command: 'switch off' }).catch(
      (e: unknown) => e,
    );
    expect(cli).toBeInstanceOf(OperatorRefused);
    expect((cli as OperatorRefused).reason).toBe('token_revoked');
    const refusedAudit = await sql<{ n: number }>`select count(*)::int as n from audit_outbox
      where event->>'type' = 'ops.refused' and event->>'outcome' = 'switch off:token_revoked'`.execute(t.db);
    expect(refusedAudit.rows[0]!.n).toBe(1);
  });

  it('a revocation of a user the directory does not know, or without a reason, is 400 and writes nothing', async () => {
    await after(new Date(Date.now() + 1000).toISOString());
    const gus = await tokenFor('ops-gus', SECRET);
    const count = async () =>
      (
        await sql<{
          n: number;
        }>`select (select count(*) from user_token_not_before) + (select count(*) from user_token_revoked_jtis) as n`.execute(t.db)
      ).rows[0]!.n;
    const n = await count();
    const typo = await request(ops)
      .post('/api/token-revocations')
      .set('authorization', `Bearer ${gus}`)
      .send({ subject: 'rep-anna', reason: 'x' });
    expect([typo.status, typo.body.error?.reason]).toEqual([400, 'unknown_user']);
    const blank = await request(ops)
      .post('/api/token-revocations')
      .set('authorization', `Bearer ${gus}`)
      .send({ subject: 'rep-ana', reason: ' ' });
    expect([blank.status, blank.body.error?.reason]).toEqual([400, 'invalid_revocation']);
    expect(await count()).toBe(n);
    const direct = await revokeUserTokens(t.db, { subject: 'nobody-here', reason: 'x' }, by, HMAC).catch(
      (e: unknown) => e as OpsUsageError,
    );
    expect((direct as OpsUsageError).reason).toBe('unknown_user');
  });
});

describe('the revocation cache of a service', () => {
  const claims = (iat: number): VerifiedUserClaims => ({ sub: 'rep-ivy', tenant: 'northwind', roles: [], exp: iat + 3600, iat });

  it('sees a revocation once its bound passed (an injected clock), never before the next load', async () => {
    let now = 1_000_000;
    const cache = new TokenRevocationCache(t.db, 1000, () => now);
    const iat = Math.floor(Date.now() / 1000) - 10;
    await cache.assertNotRevoked(claims(iat)); // loads
    await revoke('rep-ivy');
    now += 999; // within the bound: the snapshot answers
    await cache.assertNotRevoked(claims(iat));
    now += 1; // the bound: it loads again and refuses
    await expect(cache.assertNotRevoked(claims(iat))).rejects.toBeInstanceOf(TokenRevokedError);
  });

  it('fails closed: a ledger it cannot read is 503 dependency_unavailable, never an accepted token', async () => {
    const dead = createDb(`postgres://gatehouse@127.0.0.1:${await freePort()}/nothing`, 1);
    try {
      const cache = new TokenRevocationCache(dead, 1000);
      await expect(cache.assertNotRevoked(claims(Math.floor(Date.now() / 1000)))).rejects.toBeInstanceOf(DependencyUnavailable);
    } finally {
      await dead.destroy().catch(() => undefined);
    }
  });
});
