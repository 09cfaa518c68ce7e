import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decideApproval } from '@gatehouse/approval';
import { revokeUserTokens } from '@gatehouse/operations';
import { createDb, inTransaction, storeUserTokenRevocation, type Db } from '@gatehouse/ledger';
import { TokenRevokedError } from '@gatehouse/credentials';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

/**
 * A revocation racing an approval decision (docs/decisions/0695-user-tokens-can-be-revoked.md):
 * the approval is either decided before the revocation commits, or refused — never approved
 * after the revocation committed. The guarantee is the subject's token lock: the decision takes it
 * shared as its first statement and reads the revocations after it, the revocation takes it
 * exclusive before it writes. The barriers hold each side at the worst moment: a test
 * transaction holding the action's row lock stops the decision after its check and before its
 * commit; a test transaction holding the revocation uncommitted stops the decision before its check.
 */
const HMAC = 'user-token-revocation-race-hmac';
const ROUNDS = 10;
/** lead-eli's latest not-before (seconds since the epoch): each round's token is issued after it. */
let notBeforeS = 0;

/** The approver's verified token of a round: issued after every earlier revocation (it waits for the clock), so only this round's revokes it. */
async function leadToken(): Promise<{ sub: string; tenant: string; iat: number }> {
  const ms = notBeforeS * 1000 + 5 - Date.now();
  if (ms > 0) await new Promise((r) => setTimeout(r, ms));
  return { sub: 'lead-eli', tenant: 'quillfeather', iat: Math.floor(Date.now() / 1000) };
}

let t: TestDatabase;
let db: Db;
let other: Db;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  other = createDb(t.url, 2);
});
afterAll(async () => {
  await other?.destroy();
  await t?.drop();
});

/** Lock requests of this database that wait, by kind (`advisory`, `transactionid`, `tuple`…). */
async function waiting(kind: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_locks
    where not granted and locktype = ${kind}
      and (database is null or database = (select oid from pg_database where datname = current_database()))`.execute(db);
  return rows[0]!.n;
}

/** Polls until `n` lock requests of `kind` wait (true), or 5 s passed (false). */
async function untilWaiting(kind: string, n = 1): Promise<boolean> {
  for (const until = Date.now() + 5000; Date.now() < until;) {
    if ((await waiting(kind)) >= n) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
}

/** Settles `p` into what it did, and when (the order the test saw each side finish). */
function track<T>(p: Promise<T>, done: string[], name: string): Promise<T | Error> {
  return p.then(
    (v) => (done.push(name), v),
    (e: unknown) => (done.push(name), e as Error),
  );
}

async function pendingApproval(orderId: string): Promise<SeededAction> {
  return createAction(db, { orderId, amountCents: 8000, pendingApproval: {} });
}

const approve = (a: SeededAction, token: { sub: string; tenant: string; iat: number }) =>
  decideApproval(db, token, a.approvalId!, { decision: 'approve', actionVersion: a.version, actionDigest: a.digest }, HMAC);

async function outcome(a: SeededAction) {
  const row = await db.selectFrom('approvals').select(['status', 'approver']).where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from outbox
    where queue like 'executions%' and payload->>'approvalId' = ${a.approvalId!}`.execute(db);
  return { ...row, executionJobs: rows[0]!.n };
}

describe('a revocation racing an approval', () => {
  it(`the decision passed its check first: the revocation waits until the approval committed, then commits (×${ROUNDS})`, async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const a = await pendingApproval(`O-RACE-A${i}`);
      const token = await leadToken();
      const done: string[] = [];
      await other.connection().execute(async (conn) => {
        // Barrier: the action's row lock. The decision checks the token, then waits here, uncommitted.
        await sql`begin`.execute(conn);
        await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
        const decision = track(approve(a, token), done, 'decided');
        expect(await untilWaiting('transactionid')).toBe(true);
        const revocation = track(
          revokeUserTokens(db, { subject: 'lead-eli', reason: `race ${i}` }, { operator: 'ops-gus', service: 'cli' }, HMAC),
          done,
          'revoked',
        );
        // The revocation waits for the decision in flight (its exclusive lock against the decision's shared one).
        expect(await untilWaiting('advisory'), 'the revocation did not wait for the decision in flight').toBe(true);
        expect(done).toEqual([]);
        await sql`commit`.execute(conn);
        expect(await decision).toMatchObject({ status: 'approved' });
        const revoked = await revocation;
        notBeforeS = Date.parse((revoked as { notBefore: string }).notBefore) / 1000;
      });
      // The approval committed before the revocation did: approved with the token that was still valid.
      expect(done).toEqual(['decided', 'revoked']);
      expect(await outcome(a)).toEqual({ status: 'approved', approver: 'lead-eli', executionJobs: 1 });
    }
  });

  it(`the revocation took the lock first: the decision waits, then reads it and is refused, nothing decided (×${ROUNDS})`, async () => {
    for (let i = 0; i < ROUNDS; i++) {
      const a = await pendingApproval(`O-RACE-B${i}`);
      const token = await leadToken();
      const done: string[] = [];
      let decision: Promise<unknown> = Promise.resolve();
      // Barrier: the revocation written and its lock held, uncommitted, while the decision starts.
      await inTransaction(other, async (trx) => {
        const stored = await storeUserTokenRevocation(trx, { subject: 'lead-eli', by: 'ops-gus', reason: `race ${i}` });
        if (stored.kind === 'subject') notBeforeS = stored.notBeforeS;
        decision = track(approve(a, token), done, 'decided');
        expect(await untilWaiting('advisory'), 'the decision did not wait for the revocation in flight').toBe(true);
        expect(done).toEqual([]);
      });
      const err = await decision;
      expect(err).toBeInstanceOf(TokenRevokedError);
      expect(await outcome(a)).toEqual({ status: 'pending', approver: null, executionJobs: 0 });
    }
  });
});
