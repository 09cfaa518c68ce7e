import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { resultsQueue } from '@gatehouse/contracts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import {
  consumeApproval,
  grantLease,
  inTransaction,
  leaseIsLive,
  lockActionAndReserve,
  markDispatched,
  raiseFence,
  outboxJob,
  recordOutcome,
  recordOutcomeWithJob,
  reserveOperation,
  resetToPending,
  IllegalTransition,
} from '../src/index.ts';

// The operation protocol (docs/decisions/0270-one-operation-protocol.md), against a real ledger:
// reservation, approval consumption exactly once, the fenced lease, write-ahead mark, fenced
// record and reset — a stale fencing token writes nothing.

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

const op = (key: string) => tdb.db.selectFrom('operations').selectAll().where('key', '=', key).executeTakeFirstOrThrow();
const actionStatus = async (id: string) =>
  (await tdb.db.selectFrom('actions').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

/**
 * Claims the seeded action's operation (lock, reserve, grant) in one transaction; with
 * `actionStatus`, the grant is told the action's status (its move then rides on the grant, ADR 0530).
 */
async function claimOnce(actionId: string, actionStatus?: 'approved' | 'running') {
  return inTransaction(tdb.db, async (trx) => {
    const locked = await lockActionAndReserve(trx, actionId);
    return grantLease(trx, locked!.op!, { owner: 'test', leaseMs: 60_000, baseline: null, actionStatus, workflow: { nextStep: null } });
  });
}

/** Lets the operation's lease lapse, so another claim may take it. */
const expireLease = (key: string) =>
  tdb.db
    .updateTable('operations')
    .set({ lease_expires_at: new Date(0) })
    .where('key', '=', key)
    .execute();

/** A succeeded outcome of the seeded action with `evidenceRef`, to record under some fencing token. */
const succeeded = (a: { actionId: string; operationKey: string }, evidenceRef: string) => ({
  actionId: a.actionId,
  key: a.operationKey,
  status: 'succeeded' as const,
  result: { ok: 1 },
  evidenceRef,
  error: null,
});

describe('operation protocol', () => {
  it('reserves once: a second reservation returns the same row, and the filter reserves nothing for another version', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P1' });
    const none = await inTransaction(tdb.db, (trx) => lockActionAndReserve(trx, a.actionId, { version: 2, statuses: ['approved'] }));
    expect(none?.op).toBeNull();
    expect(await tdb.db.selectFrom('operations').select('key').where('key', '=', a.operationKey).execute()).toHaveLength(0);
    const first = await inTransaction(tdb.db, (trx) => lockActionAndReserve(trx, a.actionId, { version: 1, statuses: ['approved'] }));
    expect(first?.op).toMatchObject({ key: a.operationKey, status: 'pending', fencing_token: '0', dispatched_at: null });
    const row = await tdb.db.selectFrom('actions').selectAll().where('id', '=', a.actionId).executeTakeFirstOrThrow();
    const again = await inTransaction(tdb.db, (trx) => reserveOperation(trx, row));
    expect(again).toMatchObject({ key: a.operationKey, status: 'pending', fencing_token: '0' });
  });

  it('grants a fenced lease, marks dispatch only for the holder, records only under the current token', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P2' });
    const g1 = await claimOnce(a.actionId);
    expect(g1.fencingToken).toBe(1);
    expect(leaseIsLive(await op(a.operationKey))).toBe(true);
    expect(await actionStatus(a.actionId)).toBe('running');
    // a newer holder (e.g. after the lease expired) raises the token: the old one is refused everywhere
    await expireLease(a.operationKey);
    const g2 = await claimOnce(a.actionId);
    expect(g2.fencingToken).toBe(2);
    expect(await markDispatched(tdb.db, a.operationKey, g1.fencingToken)).toBe(false);
    expect((await op(a.operationKey)).dispatched_at).toBeNull();
    expect(await markDispatched(tdb.db, a.operationKey, g2.fencingToken)).toBe(true);
    const outcome = succeeded(a, 'R-1');
    expect(await inTransaction(tdb.db, (trx) => recordOutcome(trx, { ...outcome, fencingToken: g1.fencingToken }))).toBe(false);
    expect((await op(a.operationKey)).status).toBe('running');
    expect(await inTransaction(tdb.db, (trx) => recordOutcome(trx, { ...outcome, fencingToken: g2.fencingToken }))).toBe(true);
    expect(await op(a.operationKey)).toMatchObject({ status: 'succeeded', evidence_ref: 'R-1', lease_owner: null, result: { ok: 1 } });
    expect(await actionStatus(a.actionId)).toBe('succeeded');
  });

  it('the next job and its audit event ride on the fenced record: written with the outcome, and not at all when fenced out (ADR 0540)', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P9', tenant: 'northwind' });
    const g1 = await claimOnce(a.actionId);
    await expireLease(a.operationKey);
    const g2 = await claimOnce(a.actionId);
    const payload = { release: a.job.release, workflowId: a.workflowId, callId: a.callId, output: { executed: true } };
    const carried = () => ({
      job: outboxJob(resultsQueue, payload),
      audit: { type: 'operation.succeeded' as const, service: 'test', runId: a.workflowId },
    });
    const outcome = succeeded(a, 'R-9');
    const jobs = () => tdb.db.selectFrom('outbox').select(['job_id', 'payload']).where('job_id', '=', carried().job.job_id).execute();
    const events = async () =>
      (await tdb.db.selectFrom('audit_outbox').select('event').execute()).filter(
        (r) =>
          (r.event as { runId?: string; type: string }).runId === a.workflowId &&
          (r.event as { type: string }).type === 'operation.succeeded',
      );
    // a stale token: no outcome, no job, no event
    expect(
      await inTransaction(tdb.db, (trx) => recordOutcomeWithJob(trx, { ...outcome, fencingToken: g1.fencingToken }, carried())),
    ).toBeNull();
    expect((await op(a.operationKey)).status).toBe('running');
    expect(await jobs()).toEqual([]);
    expect(await events()).toEqual([]);
    // the holder: the outcome, the action's move, one job (returned ready to publish, with its tenant) and one event
    const row = await inTransaction(tdb.db, (trx) => recordOutcomeWithJob(trx, { ...outcome, fencingToken: g2.fencingToken }, carried()));
    expect(row).toMatchObject({
      job_id: carried().job.job_id,
      queue: carried().job.queue,
      fair_key: 'northwind',
      payload: { callId: a.callId },
    });
    expect(await op(a.operationKey)).toMatchObject({ status: 'succeeded', evidence_ref: 'R-9' });
    expect(await actionStatus(a.actionId)).toBe('succeeded');
    expect(await jobs()).toHaveLength(1);
    expect(await events()).toHaveLength(1);
  });

  it('resets a proven non-effect to pending only under the current token', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P3' });
    const g = await claimOnce(a.actionId);
    await markDispatched(tdb.db, a.operationKey, g.fencingToken);
    const fenced = { actionId: a.actionId, key: a.operationKey, reason: 'connection_refused' };
    expect(await inTransaction(tdb.db, (trx) => resetToPending(trx, { ...fenced, fencingToken: g.fencingToken - 1 }))).toBe(false);
    expect(await inTransaction(tdb.db, (trx) => resetToPending(trx, { ...fenced, fencingToken: g.fencingToken }))).toBe(true);
    expect(await op(a.operationKey)).toMatchObject({
      status: 'pending',
      dispatched_at: null,
      lease_owner: null,
      error: 'connection_refused',
    });
    expect(await actionStatus(a.actionId)).toBe('approved');
  });

  it('consumes an approval exactly once, and only for the action it names', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P4', amountCents: 9000 });
    const other = await createAction(tdb.db, { orderId: 'O-P5', amountCents: 9000 });
    const row = (id: string) => tdb.db.selectFrom('actions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    const bindTo = async (id: string) => ({ action: await row(id), policyRevision: true });
    expect(await inTransaction(tdb.db, async (trx) => consumeApproval(trx, a.approvalId!, await bindTo(other.actionId)))).toBe(false);
    expect(await inTransaction(tdb.db, async (trx) => consumeApproval(trx, a.approvalId!, await bindTo(a.actionId)))).toBe(true);
    expect(await inTransaction(tdb.db, async (trx) => consumeApproval(trx, a.approvalId!, await bindTo(a.actionId)))).toBe(false);
    expect((await tdb.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow()).status).toBe(
      'used',
    );
  });

  it('raises the fence of another operation unless a live lease holds it', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P6' });
    const g = await claimOnce(a.actionId);
    expect(await inTransaction(tdb.db, (trx) => raiseFence(trx, a.operationKey))).toBeNull();
    await expireLease(a.operationKey);
    expect(await inTransaction(tdb.db, (trx) => raiseFence(trx, a.operationKey))).toBe(g.fencingToken + 1);
    expect(await markDispatched(tdb.db, a.operationKey, g.fencingToken)).toBe(false);
  });

  // ADR 0530: the action's move rides on the operation's own statement when its status is known;
  // a status that turns out stale falls back to the transition read under the lock, which moves
  // it or refuses the move, as before.
  it('moves the action with the grant and the record, and falls back to the table when the status it was given is stale', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-P7' });
    expect((await claimOnce(a.actionId, 'approved')).fencingToken).toBe(1);
    expect(await actionStatus(a.actionId)).toBe('running');
    await expireLease(a.operationKey);
    // told `approved`, but the action is `running` (a reclaim): the transition reads it again
    const g2 = await claimOnce(a.actionId, 'approved');
    expect(g2.fencingToken).toBe(2);
    expect(await actionStatus(a.actionId)).toBe('running');
    // an action that is not `running` under a running operation: the record's move does not ride,
    // and the table refuses approved → succeeded (nothing of the record is kept)
    await tdb.db.updateTable('actions').set({ status: 'approved' }).where('id', '=', a.actionId).execute();
    const outcome = { actionId: a.actionId, key: a.operationKey, fencingToken: g2.fencingToken, status: 'succeeded' as const };
    const record = inTransaction(tdb.db, (trx) => recordOutcome(trx, { ...outcome, result: null, evidenceRef: null, error: null }));
    await expect(record).rejects.toBeInstanceOf(IllegalTransition);
    expect((await op(a.operationKey)).status).toBe('running');
    expect(await actionStatus(a.actionId)).toBe('approved');
  });
});
