import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, type Db } from '@gatehouse/ledger';
import { loadActiveBundles } from '@gatehouse/policy';
import { processApprovalRequest } from '../src/jobs/approval-requests.processor.ts';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, someoneWaitsOnALock, type TestDatabase } from '@gatehouse/test-harness';

// The gateway records an action `pending_approval` and enqueues the request to open its approval
// (a separate queue hop). A follow-up message that supersedes the action in between voids the
// approvals it has — none yet. The approval the request then opens must not be a pending approval
// of a superseded action: it would sit in the run's pending list, and the run's last result would
// wait on it instead of taking the next turn (docs/product/public-contract.md#follow-up-messages).

let t: TestDatabase;
let db: Db;
const bundles = loadActiveBundles({ support: 'support-p1', change: 'change-c1' });

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
});
afterAll(async () => {
  await t?.drop();
});

/** A run whose 80.00 refund (R7) is `pending_approval` and whose approval is not open yet. */
async function awaitingItsApproval(orderId: string): Promise<SeededAction> {
  const a = await createAction(db, { orderId, amountCents: 8000, pendingApproval: {} });
  await db.deleteFrom('approvals').where('action_id', '=', a.actionId).execute();
  return a;
}

const job = (a: SeededAction) => ({ release: 'rel-1', workflowId: a.workflowId, actionId: a.actionId, actionVersion: a.version });

describe('opening an approval while a follow-up supersedes its action', () => {
  it('the follow-up holds the action and commits it superseded: no approval is opened for it (× 3)', async () => {
    for (let i = 0; i < 3; i++) {
      const a = await awaitingItsApproval(`O-OPEN-RACE-${i}`);
      const other = createDb(t.url, 1);
      let outcome: string;
      try {
        outcome = await other.connection().execute(async (conn) => {
          // What the follow-up does under its locks: the run, then the action, superseded.
          await sql`begin`.execute(conn);
          await sql`select 1 from workflows where id = ${a.workflowId} for update`.execute(conn);
          await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
          await sql`update actions set status = 'superseded' where id = ${a.actionId}`.execute(conn);
          const opening = processApprovalRequest(job(a), { db, bundles });
          // The request waits for the follow-up (or, unlocked, reads the action as last committed).
          await someoneWaitsOnALock(db, 1_000);
          await sql`commit`.execute(conn);
          return opening;
        });
      } finally {
        await other.destroy();
      }
      expect(outcome).toBe('skipped:superseded');
      const open = await db.selectFrom('approvals').select(['status']).where('action_id', '=', a.actionId).execute();
      expect(open).toEqual([]);
    }
  });

  it('the follow-up holds the run, then takes the action: the request waits on the run without holding the action (lock order, ADR 0014; × 3)', async () => {
    // Deadlock detection off in both sessions: with the action locked before the run, the
    // follow-up would wait on the action behind the request, which waits on the run behind the
    // follow-up, and only the follow-up's lock_timeout would end it.
    const slowDetect = new URL(t.url);
    slowDetect.searchParams.set('options', '-c deadlock_timeout=60s');
    const requests = createDb(slowDetect.toString(), 2);
    try {
      for (let i = 0; i < 3; i++) {
        const a = await awaitingItsApproval(`O-OPEN-ORDER-${i}`);
        const other = createDb(t.url, 1);
        let outcome: string;
        try {
          outcome = await other.connection().execute(async (conn) => {
            await sql`set deadlock_timeout = '60s'`.execute(conn);
            await sql`set lock_timeout = '3s'`.execute(conn);
            await sql`begin`.execute(conn);
            await sql`select 1 from workflows where id = ${a.workflowId} for update`.execute(conn);
            const opening = processApprovalRequest(job(a), { db: requests, bundles });
            expect(await someoneWaitsOnALock(db, 2_000)).toBe(true);
            // The follow-up goes on to the action: it must not wait on the request.
            await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
            await sql`update actions set status = 'superseded' where id = ${a.actionId}`.execute(conn);
            await sql`commit`.execute(conn);
            return opening;
          });
        } finally {
          await other.destroy();
        }
        expect(outcome).toBe('skipped:superseded');
        expect(await db.selectFrom('approvals').select(['status']).where('action_id', '=', a.actionId).execute()).toEqual([]);
      }
    } finally {
      await requests.destroy();
    }
  }, 60_000);

  it('an action still pending_approval gets its approval opened once', async () => {
    const a = await awaitingItsApproval('O-OPEN-RACE-OK');
    expect(await processApprovalRequest(job(a), { db, bundles })).toBe('opened');
    expect(await processApprovalRequest(job(a), { db, bundles })).toBe('already_open');
  });
});
