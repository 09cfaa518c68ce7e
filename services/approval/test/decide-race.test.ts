import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConflictError, Gone } from '@gatehouse/platform';
import { createDb, type Db } from '@gatehouse/ledger';
import { decideApproval } from '../src/domain/decide.ts';
// @gatehouse/testing is not linked into this service's node_modules; imported by path.
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, someoneWaitsOnALock, type TestDatabase } from '@gatehouse/test-harness';

// A decision reads the approval, then locks its action (lock order: actions → approvals) and
// decides with a conditional UPDATE. When the approval changed while the decision waited for
// that lock, the refusal says what changed it: a follow-up that superseded the action is 409
// `stale_version` (the approver must look at the new version), a stop of its run 410
// `workflow_stopped`, the expiry sweep 410 `expired`, another approver's decision 410
// `already_<status>`. It used to be 410 `already_decided` for every case.

let t: TestDatabase;
let db: Db;
const HMAC = 'test-audit-hmac';
const LEAD = { sub: 'lead-eli', tenant: 'quillfeather' };

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
});
afterAll(async () => {
  await t?.drop();
});

/** A run waiting on a pending approval of a 80.00 refund (R7), expiring in 15 minutes. */
async function pendingApproval(orderId: string): Promise<SeededAction> {
  return createAction(db, { orderId, amountCents: 8000, pendingApproval: {} });
}

/**
 * Holds `a`'s action locked in a transaction of its own, runs `change` in it, starts the lead's
 * approval, waits until that decision waits on the lock, commits, and returns how the decision ended.
 */
async function decideWhile(a: SeededAction, change: (conn: Db) => Promise<unknown>) {
  const other = createDb(t.url, 1);
  try {
    return await other.connection().execute(async (conn) => {
      await sql`begin`.execute(conn);
      await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
      await change(conn);
      const decision = decideApproval(
        db,
        LEAD,
        a.approvalId!,
        { decision: 'approve', actionVersion: a.version, actionDigest: a.digest },
        HMAC,
      ).then(
        () => null,
        (err: unknown) => err,
      );
      expect(await someoneWaitsOnALock(db)).toBe(true);
      await sql`commit`.execute(conn);
      return decision;
    });
  } finally {
    await other.destroy();
  }
}

describe('a decision whose approval changed while it waited for the action', () => {
  it('a follow-up superseded the action meanwhile: 409 stale_version, nothing decided (× 5)', async () => {
    for (let i = 0; i < 5; i++) {
      const a = await pendingApproval(`O-DECIDE-RACE-S${i}`);
      const err = await decideWhile(a, async (conn) => {
        await sql`update actions set status = 'superseded' where id = ${a.actionId}`.execute(conn);
        await sql`update approvals set status = 'void' where id = ${a.approvalId}`.execute(conn);
      });
      expect(err).toBeInstanceOf(ConflictError);
      expect((err as ConflictError).reason).toBe('stale_version');
      const row = await db.selectFrom('approvals').select(['status', 'approver']).where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
      expect(row).toEqual({ status: 'void', approver: null });
    }
  });

  it('its run was stopped meanwhile (its actions ended, the approval voided): 410 workflow_stopped, not a stale version', async () => {
    const a = await pendingApproval('O-DECIDE-RACE-STOP');
    const err = await decideWhile(a, async (conn) => {
      await sql`update workflows set state = 'stopped', stop_reason = 'budget_exhausted' where id = ${a.workflowId}`.execute(conn);
      await sql`update actions set status = 'superseded' where id = ${a.actionId}`.execute(conn);
      await sql`update approvals set status = 'void', reason = 'run_stopped' where id = ${a.approvalId}`.execute(conn);
    });
    expect(err).toBeInstanceOf(Gone);
    expect((err as Gone).reason).toBe('workflow_stopped');
  });

  it('the sweep expired it meanwhile: 410 expired, the same reason as an approval past its expiry', async () => {
    const a = await pendingApproval('O-DECIDE-RACE-EXP');
    const err = await decideWhile(a, (conn) => sql`update approvals set status = 'expired' where id = ${a.approvalId}`.execute(conn));
    expect(err).toBeInstanceOf(Gone);
    expect((err as Gone).reason).toBe('expired');
  });

  it('another lead approved it meanwhile: 410 already_approved', async () => {
    const a = await pendingApproval('O-DECIDE-RACE-A');
    const err = await decideWhile(a, (conn) =>
      sql`update approvals set status = 'approved', approver = 'lead-fay', decided_at = now() where id = ${a.approvalId}`.execute(conn),
    );
    expect(err).toBeInstanceOf(Gone);
    expect((err as Gone).reason).toBe('already_approved');
  });
});

// docs/product/public-contract.md#approvals: a run that ended answers `workflow_<state>` first,
// before any 409 — whether the body names another version or another digest.
describe('a decision on an approval whose run ended', () => {
  it('names another version or another digest: 410 workflow_stopped either way, nothing decided', async () => {
    const a = await pendingApproval('O-DECIDE-ENDED');
    await db.updateTable('workflows').set({ state: 'stopped', stop_reason: 'budget_exhausted' }).where('id', '=', a.workflowId).execute();
    await db.updateTable('approvals').set({ status: 'void', reason: 'run_stopped' }).where('id', '=', a.approvalId!).execute();
    const refusal = (body: { actionVersion: number; actionDigest: string }) =>
      decideApproval(db, LEAD, a.approvalId!, { decision: 'approve', ...body }, HMAC).then(
        () => 'decided',
        (err: Gone | ConflictError) => `${err.constructor.name}:${err.reason}`,
      );
    expect(await refusal({ actionVersion: a.version + 1, actionDigest: a.digest })).toBe('Gone:workflow_stopped');
    expect(await refusal({ actionVersion: a.version, actionDigest: 'a'.repeat(64) })).toBe('Gone:workflow_stopped');
    const row = await db.selectFrom('approvals').select(['status', 'approver']).where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'void', approver: null });
  });
});
