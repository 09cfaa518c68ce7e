import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, createRedis, OutboxRelay, QueueRegistry } from '@gatehouse/platform';
import { createDb, inTransaction, stopRun, type Db } from '@gatehouse/ledger';
import { sweepExpiredApprovals } from '../src/jobs/expiry.sweep.ts';
// @gatehouse/testing is not linked into this service's node_modules; imported by path.
import { createAction, deadlockCount, type SeededAction } from '@gatehouse/testing';
import {
  createTestDatabase,
  dropQueuePrefix,
  someoneWaitsOnALock,
  testQueuePrefix,
  TEST_REDIS_URL,
  type TestDatabase,
} from '@gatehouse/test-harness';

// The expiry sweep ends a due approval after locking its run and its action, the order every
// other writer takes (workflows → actions → approvals, docs/decisions/0014-row-lock-order.md). It
// used to update the approval first and lock the action after, so a stop of the same run —
// which locks the run and its actions, then voids their approvals (ADR 0610) — could deadlock
// with it.

let t: TestDatabase;
let db: Db;
let prefix: string;
let redis: ReturnType<typeof createRedis>;
let relay: OutboxRelay;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  prefix = testQueuePrefix();
  redis = createRedis(TEST_REDIS_URL);
  relay = new OutboxRelay(db, new QueueRegistry(redis, prefix), createLogger('approval-test'));
});
afterAll(async () => {
  redis?.disconnect();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

/** A run waiting on a refund approval that expired a minute ago. */
async function expiredApproval(orderId: string): Promise<SeededAction> {
  return createAction(db, { orderId, amountCents: 8000, pendingApproval: { expiresInMs: -60_000 } });
}

const approvalStatus = async (id: string) =>
  (await db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

/** The `approval.decided` (expired) events of an approval and the `results` rows of its run. */
async function expiryEvidence(a: SeededAction): Promise<{ expired: number; answered: number }> {
  const expired = await sql<{ n: number }>`select count(*)::int as n from audit_outbox
    where event->>'type' = 'approval.decided' and event->>'approvalId' = ${a.approvalId} and event->>'outcome' = 'expired'`.execute(db);
  const answered = await sql<{ n: number }>`select count(*)::int as n from outbox
    where queue like 'results.%' and payload->>'workflowId' = ${a.workflowId}`.execute(db);
  return { expired: expired.rows[0]!.n, answered: answered.rows[0]!.n };
}

describe('the expiry sweep takes the locks in the ledger order', () => {
  it('a writer holding the run and the action voids the approval while the sweep waits: no deadlock, nothing expired', async () => {
    const a = await expiredApproval('O-SWEEP-LOCK-1');
    const deadlocks = await deadlockCount(db, t.name);
    // a connection of its own, whose transaction stays open while the test goes on
    const stopperDb = createDb(t.url, 1);
    try {
      await stopperDb.connection().execute(async (stopper) => {
        // the order of a stop (ADR 0610): the run, its unclaimed actions, then their approvals
        await sql`begin`.execute(stopper);
        await sql`select 1 from workflows where id = ${a.workflowId} for update`.execute(stopper);
        await sql`select 1 from actions where id = ${a.actionId} for update`.execute(stopper);
        const sweep = sweepExpiredApprovals({ db, relay });
        expect(await someoneWaitsOnALock(db)).toBe(true);
        // The sweep that updated the approval first would hold it here, and this would deadlock.
        await sql`update approvals set status = 'void', decided_at = now() where id = ${a.approvalId}`.execute(stopper);
        await sql`update actions set status = 'superseded' where id = ${a.actionId}`.execute(stopper);
        await sql`commit`.execute(stopper);
        await expect(sweep).resolves.toBe(0);
      });
    } finally {
      await stopperDb.destroy();
    }
    expect(await deadlockCount(db, t.name)).toBe(deadlocks);
    expect(await approvalStatus(a.approvalId!)).toBe('void');
    expect(await expiryEvidence(a)).toEqual({ expired: 0, answered: 0 });
  });

  it('a sweep and a stop of the same run started together (× 20): one of them ends the approval, once, and neither fails', async () => {
    const deadlocks = await deadlockCount(db, t.name);
    const outcomes: string[] = [];
    for (let i = 0; i < 20; i++) {
      const a = await expiredApproval(`O-SWEEP-LOCK-R${i}`);
      const stop = inTransaction(db, (trx) =>
        stopRun(trx, { id: a.workflowId }, 'budget_exhausted', 'Submit a new ticket.', 'agent-loop', {
          onlyFrom: ['awaiting_approval'],
        }),
      );
      const [, swept] = await Promise.all([stop, sweepExpiredApprovals({ db, relay })]);
      const status = await approvalStatus(a.approvalId!);
      const evidence = await expiryEvidence(a);
      // expired by the sweep (audited and answered once) or voided by the stop (neither)
      expect(status === 'expired' ? { expired: 1, answered: 1, swept: 1 } : { expired: 0, answered: 0, swept: 0 }).toEqual({
        ...evidence,
        swept,
      });
      outcomes.push(status);
    }
    expect(outcomes.every((s) => s === 'expired' || s === 'void')).toBe(true);
    expect(await deadlockCount(db, t.name)).toBe(deadlocks);
  });
});
