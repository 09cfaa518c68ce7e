import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Selectable } from 'kysely';
import {
  ACTION_TRANSITIONS,
  IllegalTransition,
  inTransaction,
  transitionAction,
  transitionWorkflow,
  WORKFLOW_TRANSITIONS,
  type ActionStatus,
  type Db,
  type WorkflowState,
  type WorkflowsTable,
} from '../src/index.ts';
// @gatehouse/testing is not a dependency of this package (no node_modules link); imported by path.
import { createAction, createTestDatabase, type TestDatabase } from '../../testing/src/index.ts';

const STATES: WorkflowState[] = [
  'received',
  'investigating',
  'awaiting_approval',
  'executing',
  'completed',
  'stopped',
  'paused',
  'needs_reconciliation',
];
const STATUSES: ActionStatus[] = [
  'proposed',
  'normalized',
  'pending_approval',
  'approved',
  'running',
  'succeeded',
  'failed',
  'failed_unknown',
  'denied',
  'suppressed',
  'superseded',
  'compensated',
];

let t: TestDatabase;
let db: Db;
let order = 0;

/** A seeded workflow (and its one action) put in `state` / `status`, with a known next step. */
async function seed(state: WorkflowState, status: ActionStatus = 'approved'): Promise<{ workflowId: string; actionId: string }> {
  const a = await createAction(db, { orderId: `O-${1000 + (order++ % 9000)}` });
  const past = new Date(Date.now() - 60_000);
  await db.updateTable('workflows').set({ state, next_step: 'before', updated_at: past }).where('id', '=', a.workflowId).execute();
  await db.updateTable('actions').set({ status, updated_at: past }).where('id', '=', a.actionId).execute();
  return a;
}

const row = (id: string): Promise<Selectable<WorkflowsTable>> =>
  db.selectFrom('workflows').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const auditCount = async (runId: string): Promise<number> =>
  (await db.selectFrom('audit_outbox').select('event').execute()).filter((r) => (r.event as { runId?: string }).runId === runId).length;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
});
afterAll(async () => {
  await t?.drop();
});

describe('workflow transition table', () => {
  it.each(WORKFLOW_TRANSITIONS.map((x) => [x.from, x.to] as const))('%s → %s is accepted and audited', async (from, to) => {
    const { workflowId } = await seed(from);
    const prev = await inTransaction(db, (trx) =>
      transitionWorkflow(trx, workflowId, {
        to,
        nextStep: 'after',
        stopReason: to === 'stopped' ? 'denied' : undefined,
        audit: { type: 'run.resumed', service: 'test', outcome: `${from}->${to}` },
      }),
    );
    expect(prev).toBe(from);
    const wf = await row(workflowId);
    expect(wf.state).toBe(to);
    expect(wf.next_step).toBe('after');
    expect(wf.updated_at.getTime()).toBeGreaterThan(Date.now() - 30_000);
    expect(await auditCount(workflowId)).toBe(1);
  });

  const illegal = STATES.flatMap((from) => STATES.map((to) => [from, to] as const)).filter(
    ([from, to]) => !WORKFLOW_TRANSITIONS.some((x) => x.from === from && x.to === to),
  );

  it('refuses out-of-order moves: nothing returns to received, completed is final', () => {
    expect(illegal).toContainEqual(['investigating', 'received']);
    expect(illegal).toContainEqual(['completed', 'investigating']);
    expect(illegal).toContainEqual(['stopped', 'executing']);
    expect(illegal).toContainEqual(['needs_reconciliation', 'investigating']);
    expect(illegal).toContainEqual(['paused', 'completed']);
  });

  it.each(illegal)('%s → %s throws IllegalTransition and writes nothing', async (from, to) => {
    const { workflowId } = await seed(from);
    const before = await row(workflowId);
    // Caught inside the transaction, which then commits: the function itself wrote nothing.
    const err = await inTransaction(db, async (trx) => {
      try {
        await transitionWorkflow(trx, workflowId, {
          to,
          nextStep: 'after',
          stopReason: 'denied',
          audit: { type: 'run.resumed', service: 'test' },
        });
        return null;
      } catch (e) {
        return e;
      }
    });
    expect(err).toBeInstanceOf(IllegalTransition);
    expect(err).toMatchObject({ entity: 'workflow', from, to });
    expect(await row(workflowId)).toEqual(before);
    expect(await auditCount(workflowId)).toBe(0);
  });

  it('refuses a transition that misses its guard (stopped without a reason, paused without a next step)', async () => {
    const a = await seed('investigating');
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'stopped', nextStep: 'x' }))).rejects.toMatchObject(
      {
        name: 'IllegalTransition',
        missing: ['stop_reason'],
      },
    );
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'paused' }))).rejects.toBeInstanceOf(
      IllegalTransition,
    );
    expect((await row(a.workflowId)).state).toBe('investigating');
  });

  it('onlyFrom excludes the current state: returns null and changes nothing', async () => {
    const a = await seed('awaiting_approval');
    const before = await row(a.workflowId);
    const r = await inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'executing', onlyFrom: ['investigating'] }));
    expect(r).toBeNull();
    expect(await row(a.workflowId)).toEqual(before);
  });
});

describe('action transition table', () => {
  it.each(ACTION_TRANSITIONS.map((x) => [x.from, x.to] as const))('%s → %s is accepted', async (from, to) => {
    const { actionId } = await seed('executing', from);
    expect(await inTransaction(db, (trx) => transitionAction(trx, actionId, { to }))).toBe(from);
    const a = await db.selectFrom('actions').select(['status']).where('id', '=', actionId).executeTakeFirstOrThrow();
    expect(a.status).toBe(to);
  });

  const illegal = STATUSES.flatMap((from) => STATUSES.map((to) => [from, to] as const)).filter(
    ([from, to]) => from !== to && !ACTION_TRANSITIONS.some((x) => x.from === from && x.to === to),
  );

  it.each(illegal)('%s → %s throws IllegalTransition and writes nothing', async (from, to) => {
    const { actionId } = await seed('executing', from);
    const before = await db.selectFrom('actions').selectAll().where('id', '=', actionId).executeTakeFirstOrThrow();
    const err = await inTransaction(db, async (trx) => transitionAction(trx, actionId, { to }).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(IllegalTransition);
    expect(await db.selectFrom('actions').selectAll().where('id', '=', actionId).executeTakeFirstOrThrow()).toEqual(before);
  });

  it('a repeat of the current status (a redelivery) writes nothing', async () => {
    const { actionId } = await seed('executing', 'succeeded');
    const before = await db.selectFrom('actions').selectAll().where('id', '=', actionId).executeTakeFirstOrThrow();
    expect(await inTransaction(db, (trx) => transitionAction(trx, actionId, { to: 'succeeded' }))).toBe('succeeded');
    expect(await db.selectFrom('actions').selectAll().where('id', '=', actionId).executeTakeFirstOrThrow()).toEqual(before);
  });
});
