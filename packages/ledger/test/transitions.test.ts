import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import {
  ACTION_INITIAL_STATUSES,
  ACTION_TRANSITIONS,
  IllegalTransition,
  readActionsView,
  readWorkflowEvents,
  recordWorkflowEvent,
  reserveOperation,
  inTransaction,
  transitionAction,
  transitionWorkflow,
  WORKFLOW_TRANSITIONS,
  type ActionGuard,
  type ActionStatus,
  type Db,
  type OperationStatus,
  type WorkflowGuard,
  type WorkflowState,
  type WorkflowsTable,
} from '../src/index.ts';
import { createAction } from '@gatehouse/testing';
import { WorkflowEventSchema } from '@gatehouse/contracts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

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

/** A seeded workflow (and its one action, approval approved) put in `state` / `status`, with a known next step. */
async function seed(state: WorkflowState, status: ActionStatus = 'approved'): Promise<{ workflowId: string; actionId: string }> {
  const a = await createAction(db, { orderId: `O-${1000 + (order++ % 9000)}`, decision: 'REQUIRE_APPROVAL' });
  const past = new Date(Date.now() - 60_000);
  await db.updateTable('workflows').set({ state, next_step: 'before', updated_at: past }).where('id', '=', a.workflowId).execute();
  await db.updateTable('actions').set({ status, updated_at: past }).where('id', '=', a.actionId).execute();
  return a;
}

/** The action's operation, reserved, in `status`. */
async function operation(actionId: string, status: OperationStatus, digest?: string): Promise<void> {
  const a = await db.selectFrom('actions').selectAll().where('id', '=', actionId).executeTakeFirstOrThrow();
  await inTransaction(db, (trx) => reserveOperation(trx, { ...a, digest: digest ?? a.digest }));
  await db.updateTable('operations').set({ status }).where('action_id', '=', actionId).execute();
}

/** An unanswered function call in the workflow's transcript. */
async function unansweredCall(workflowId: string): Promise<void> {
  await db
    .insertInto('conversation_items')
    .values({ workflow_id: workflowId, round: 1, kind: 'function_call', call_id: `c_${order++}`, item: JSON.stringify({}) })
    .execute();
}

/** Makes `guard` hold for the seeded workflow and action (most hold on a fresh seed). */
async function satisfyWorkflow(guard: WorkflowGuard, s: { workflowId: string; actionId: string }): Promise<void> {
  if (guard === 'approval_awaited')
    await db.updateTable('actions').set({ status: 'pending_approval' }).where('id', '=', s.actionId).execute();
  if (guard === 'tool_switched_off')
    await db
      .insertInto('tool_switches')
      .values({ tool: 'issue_refund', enabled: false, changed_by: 'test' })
      .onConflict((oc) => oc.column('tool').doUpdateSet({ enabled: false }))
      .execute();
  if (guard === 'outcome_unknown') await operation(s.actionId, 'failed_unknown');
}

/** Makes `guard` fail for the seeded workflow and action; false when the guard reads only the input. */
async function violateWorkflow(guard: WorkflowGuard, s: { workflowId: string; actionId: string }): Promise<boolean> {
  switch (guard) {
    case 'all_calls_answered':
    case 'nothing_outstanding':
      await unansweredCall(s.workflowId);
      return true;
    case 'action_to_execute':
    case 'approval_awaited':
    case 'tool_switched_off':
      await db.updateTable('actions').set({ status: 'succeeded' }).where('id', '=', s.actionId).execute();
      return true;
    case 'held_tools_on':
      await satisfyWorkflow('tool_switched_off', s);
      return true;
    case 'reconciled':
      await operation(s.actionId, 'failed_unknown');
      return true;
    case 'outcome_unknown':
      await operation(s.actionId, 'succeeded');
      return true;
    case 'stop_reason_known':
      return false;
  }
}

const row = (id: string): Promise<Selectable<WorkflowsTable>> =>
  db.selectFrom('workflows').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const actionRow = (id: string) => db.selectFrom('actions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const auditCount = async (runId: string): Promise<number> =>
  (await db.selectFrom('audit_outbox').select('event').execute()).filter((r) => (r.event as { runId?: string }).runId === runId).length;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
});
afterEach(async () => {
  await db.deleteFrom('tool_switches').execute();
});
afterAll(async () => {
  await t?.drop();
});

const input = (to: WorkflowState) => ({
  to,
  nextStep: 'after',
  stopReason: to === 'stopped' ? 'denied' : undefined,
  audit:
    to === 'stopped'
      ? { type: 'run.stopped' as const, service: 'test', outcome: 'denied' }
      : { type: 'run.resumed' as const, service: 'test', outcome: `->${to}` },
});

describe('workflow transition table', () => {
  it('lists each (from, to) once, each with one guard; nothing returns to received; completed is final', () => {
    const keys = WORKFLOW_TRANSITIONS.map((x) => `${x.from}>${x.to}`);
    expect(new Set(keys).size).toBe(keys.length);
    expect(WORKFLOW_TRANSITIONS.every((x) => typeof x.guard === 'string' && x.why.length > 0)).toBe(true);
    expect(WORKFLOW_TRANSITIONS.filter((x) => x.to === 'received' || x.from === 'completed')).toEqual([]);
    expect(WORKFLOW_TRANSITIONS.filter((x) => x.from === 'stopped').map((x) => x.to)).toEqual(['needs_reconciliation']);
    expect(WORKFLOW_TRANSITIONS.filter((x) => x.from === 'needs_reconciliation').map((x) => x.to)).toEqual(['completed']);
  });

  it.each(WORKFLOW_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))(
    '%s → %s is accepted when %s holds, and audited',
    async (from, to, guard) => {
      const s = await seed(from);
      await satisfyWorkflow(guard, s);
      expect(await inTransaction(db, (trx) => transitionWorkflow(trx, s.workflowId, input(to)))).toBe(from);
      const wf = await row(s.workflowId);
      expect(wf.state).toBe(to);
      expect(wf.next_step).toBe('after');
      expect(wf.updated_at.getTime()).toBeGreaterThan(Date.now() - 30_000);
      expect(await auditCount(s.workflowId)).toBe(1);
    },
  );

  it.each(WORKFLOW_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))(
    '%s → %s is refused when %s does not hold, writing nothing',
    async (from, to, guard) => {
      const s = await seed(from);
      await satisfyWorkflow(guard, s);
      const bad = await violateWorkflow(guard, s);
      const before = await row(s.workflowId);
      const err = await inTransaction(db, (trx) =>
        transitionWorkflow(trx, s.workflowId, bad ? input(to) : { ...input(to), stopReason: 'because' }).catch((e: unknown) => e),
      );
      expect(err).toBeInstanceOf(IllegalTransition);
      expect(err).toMatchObject({ entity: 'workflow', from, to, missing: [guard] });
      expect(await row(s.workflowId)).toEqual(before);
      // the UPDATE ran and matched no row: its audit event and workflow event are not written (ADR 0540)
      expect(await auditCount(s.workflowId)).toBe(0);
      expect(await readWorkflowEvents(db, s.workflowId, 0)).toEqual([]);
    },
  );

  it('nothing_outstanding: every call answered, a run still does not complete while an operation of it is running', async () => {
    // The chaos run once showed a completed run with its refund action running (ADR 0672: the
    // checks read it mid-execution). Completing needs the operation recorded too, not only the
    // call answered: an answer from anywhere else (a replay, a refusal) cannot complete a run
    // whose effect is in flight.
    const s = await seed('executing', 'running');
    await operation(s.actionId, 'running');
    const err = await inTransaction(db, (trx) => transitionWorkflow(trx, s.workflowId, input('completed')).catch((e: unknown) => e));
    expect(err).toMatchObject({ name: 'IllegalTransition', from: 'executing', to: 'completed', missing: ['nothing_outstanding'] });
    expect((await row(s.workflowId)).state).toBe('executing');
    await db.updateTable('operations').set({ status: 'succeeded' }).where('action_id', '=', s.actionId).execute();
    await inTransaction(db, (trx) => transitionAction(trx, s.actionId, { to: 'succeeded' }));
    expect(await inTransaction(db, (trx) => transitionWorkflow(trx, s.workflowId, input('completed')))).toBe('executing');
  });

  const illegal = STATES.flatMap((from) => STATES.map((to) => [from, to] as const)).filter(
    ([from, to]) => !WORKFLOW_TRANSITIONS.some((x) => x.from === from && x.to === to),
  );

  it('refuses out-of-order moves: nothing returns to received, completed is final', () => {
    expect(illegal).toContainEqual(['investigating', 'received']);
    expect(illegal).toContainEqual(['completed', 'investigating']);
    expect(illegal).toContainEqual(['completed', 'executing']);
    expect(illegal).toContainEqual(['stopped', 'investigating']);
    expect(illegal).toContainEqual(['stopped', 'executing']);
    expect(illegal).toContainEqual(['needs_reconciliation', 'investigating']);
    expect(illegal).toContainEqual(['paused', 'completed']);
    expect(illegal).toContainEqual(['received', 'executing']);
    expect(illegal).toContainEqual(['received', 'awaiting_approval']);
  });

  it.each(illegal)('%s → %s throws IllegalTransition and writes nothing', async (from, to) => {
    const s = await seed(from);
    const before = await row(s.workflowId);
    // Caught inside the transaction, which then commits: the function itself wrote nothing.
    const err = await inTransaction(db, (trx) => transitionWorkflow(trx, s.workflowId, input(to)).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(IllegalTransition);
    expect(err).toMatchObject({ entity: 'workflow', from, to, missing: [] });
    expect(await row(s.workflowId)).toEqual(before);
    expect(await auditCount(s.workflowId)).toBe(0);
  });

  it('refuses a transition that misses what its target requires (stopped without a reason, paused without a next step)', async () => {
    const a = await seed('investigating');
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'stopped', nextStep: 'x' }))).rejects.toMatchObject(
      { name: 'IllegalTransition', missing: ['stop_reason', 'run_stopped_event'] },
    );
    // A stop that would leave the audit trail silent (no run.stopped event) is refused.
    const silent = { to: 'stopped' as const, stopReason: 'denied', nextStep: 'x' };
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, silent))).rejects.toMatchObject({
      name: 'IllegalTransition',
      missing: ['run_stopped_event'],
    });
    const otherEvent = { ...silent, audit: { type: 'run.resumed' as const, service: 'test', outcome: 'denied' } };
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, otherEvent))).rejects.toMatchObject({
      missing: ['run_stopped_event'],
    });
    await satisfyWorkflow('tool_switched_off', a);
    await expect(inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'paused' }))).rejects.toMatchObject({
      missing: ['next_step'],
    });
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

/** Makes the guard of `from → to` hold for the seeded action (its approval is `approved` by default). */
async function satisfyAction(guard: ActionGuard, to: ActionStatus, actionId: string): Promise<void> {
  if (guard === 'approval_refused') await db.updateTable('approvals').set({ status: 'denied' }).where('action_id', '=', actionId).execute();
  if (guard === 'lease_granted') await operation(actionId, 'running');
  if (guard === 'operation_reset') await operation(actionId, 'pending');
  if (guard === 'outcome_recorded') await operation(actionId, to === 'denied' ? 'failed' : (to as OperationStatus));
  if (guard === 'remediated') {
    const a = await actionRow(actionId);
    await db
      .insertInto('reconciliation_items')
      .values({
        id: randomUUID(),
        run_id: randomUUID(),
        class: 'amount_mismatch',
        owner: 'payments-lead',
        status: 'open',
        subject: `op:${a.operation_key}`,
        operation_key: a.operation_key,
        detail: JSON.stringify({}),
        remediation: 'reverse',
      })
      .execute();
  }
}

/** Makes the guard fail (after {@link satisfyAction}). */
async function violateAction(guard: ActionGuard, actionId: string): Promise<void> {
  const setOp = (status: OperationStatus) => db.updateTable('operations').set({ status }).where('action_id', '=', actionId).execute();
  if (guard === 'approval_granted')
    await db.updateTable('approvals').set({ status: 'expired' }).where('action_id', '=', actionId).execute();
  if (guard === 'approval_refused')
    await db.updateTable('approvals').set({ status: 'approved' }).where('action_id', '=', actionId).execute();
  if (guard === 'unclaimed') await operation(actionId, 'running');
  if (guard === 'lease_granted') await setOp('pending');
  if (guard === 'operation_reset' || guard === 'outcome_recorded') await setOp('running');
  if (guard === 'remediated') await db.updateTable('reconciliation_items').set({ remediation: 'ratify' }).execute();
}

describe('action transition table', () => {
  it('lists each (from, to) once, each with one guard; an action is created in a decided status', () => {
    const keys = ACTION_TRANSITIONS.map((x) => `${x.from}>${x.to}`);
    expect(new Set(keys).size).toBe(keys.length);
    expect(
      ACTION_TRANSITIONS.filter((x) => ['proposed', 'normalized', 'suppressed', 'superseded', 'compensated', 'denied'].includes(x.from)),
    ).toEqual([]);
    expect(ACTION_INITIAL_STATUSES).toEqual(['approved', 'pending_approval', 'denied', 'suppressed']);
  });

  it.each(ACTION_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))('%s → %s is accepted when %s holds', async (from, to, guard) => {
    const { actionId } = await seed('executing', from);
    await satisfyAction(guard, to, actionId);
    expect(await inTransaction(db, (trx) => transitionAction(trx, actionId, { to }))).toBe(from);
    expect((await actionRow(actionId)).status).toBe(to);
  });

  it.each(ACTION_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))(
    '%s → %s is refused when %s does not hold, writing nothing',
    async (from, to, guard) => {
      const { actionId } = await seed('executing', from);
      await satisfyAction(guard, to, actionId);
      await violateAction(guard, actionId);
      const before = await actionRow(actionId);
      const err = await inTransaction(db, (trx) => transitionAction(trx, actionId, { to }).catch((e: unknown) => e));
      expect(err).toMatchObject({ name: 'IllegalTransition', entity: 'action', from, to, missing: [guard] });
      expect(await actionRow(actionId)).toEqual(before);
    },
  );

  const illegal = STATUSES.flatMap((from) => STATUSES.map((to) => [from, to] as const)).filter(
    ([from, to]) => from !== to && !ACTION_TRANSITIONS.some((x) => x.from === from && x.to === to),
  );

  it('refuses out-of-order moves: succeeded → running, superseded → approved, denied → approved', () => {
    expect(illegal).toContainEqual(['succeeded', 'running']);
    expect(illegal).toContainEqual(['superseded', 'approved']);
    expect(illegal).toContainEqual(['denied', 'approved']);
    expect(illegal).toContainEqual(['pending_approval', 'running']);
  });

  it.each(illegal)('%s → %s throws IllegalTransition and writes nothing', async (from, to) => {
    const { actionId } = await seed('executing', from);
    const before = await actionRow(actionId);
    const err = await inTransaction(db, async (trx) => transitionAction(trx, actionId, { to }).catch((e: unknown) => e));
    expect(err).toBeInstanceOf(IllegalTransition);
    expect(await actionRow(actionId)).toEqual(before);
  });

  it('a repeat of the current status (a redelivery) writes nothing', async () => {
    const { actionId } = await seed('executing', 'succeeded');
    const before = await actionRow(actionId);
    expect(await inTransaction(db, (trx) => transitionAction(trx, actionId, { to: 'succeeded' }))).toBe('succeeded');
    expect(await actionRow(actionId)).toEqual(before);
  });
});

// ADR 0390: a caller that holds the row lock names the state it read (`lockedFrom`) and the
// transition is one conditional UPDATE; a stale `lockedFrom` must never write from the wrong state.
describe('transitions with the state the caller holds locked (lockedFrom)', () => {
  it.each(WORKFLOW_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))(
    'workflow %s → %s: accepted when %s holds, refused (nothing written) when it does not',
    async (from, to, guard) => {
      const ok = await seed(from);
      await satisfyWorkflow(guard, ok);
      expect(await inTransaction(db, (trx) => transitionWorkflow(trx, ok.workflowId, { ...input(to), lockedFrom: from }))).toBe(from);
      expect((await row(ok.workflowId)).state).toBe(to);
      const no = await seed(from);
      await satisfyWorkflow(guard, no);
      const bad = await violateWorkflow(guard, no);
      const before = await row(no.workflowId);
      const inp = bad ? input(to) : { ...input(to), stopReason: 'because' };
      const err = await inTransaction(db, (trx) =>
        transitionWorkflow(trx, no.workflowId, { ...inp, lockedFrom: from }).catch((e: unknown) => e),
      );
      expect(err).toMatchObject({ name: 'IllegalTransition', entity: 'workflow', from, to, missing: [guard] });
      expect(await row(no.workflowId)).toEqual(before);
    },
  );

  it('a stale workflow lockedFrom reads the state again: moves from the real state, or refuses by it', async () => {
    const a = await seed('awaiting_approval');
    const moved = await inTransaction(db, (trx) =>
      transitionWorkflow(trx, a.workflowId, { to: 'executing', nextStep: null, lockedFrom: 'investigating' }),
    );
    expect(moved).toBe('awaiting_approval');
    expect((await row(a.workflowId)).state).toBe('executing');
    const done = await seed('completed');
    const before = await row(done.workflowId);
    const err = await inTransaction(db, (trx) =>
      transitionWorkflow(trx, done.workflowId, { to: 'executing', lockedFrom: 'investigating' }).catch((e: unknown) => e),
    );
    expect(err).toMatchObject({ name: 'IllegalTransition', from: 'completed', to: 'executing', missing: [] });
    expect(await row(done.workflowId)).toEqual(before);
    // onlyFrom is judged on the real state, not on the stale one.
    const held = await seed('paused');
    expect(
      await inTransaction(db, (trx) =>
        transitionWorkflow(trx, held.workflowId, { to: 'executing', onlyFrom: ['investigating'], lockedFrom: 'investigating' }),
      ),
    ).toBeNull();
    expect((await row(held.workflowId)).state).toBe('paused');
    // A stale state that onlyFrom excludes is read again: the real state may be one it allows.
    const live = await seed('awaiting_approval');
    expect(
      await inTransaction(db, (trx) =>
        transitionWorkflow(trx, live.workflowId, {
          to: 'executing',
          nextStep: null,
          onlyFrom: ['awaiting_approval'],
          lockedFrom: 'investigating',
        }),
      ),
    ).toBe('awaiting_approval');
    expect((await row(live.workflowId)).state).toBe('executing');
  });

  it.each(ACTION_TRANSITIONS.map((x) => [x.from, x.to, x.guard] as const))(
    'action %s → %s: accepted when %s holds, refused (nothing written) when it does not',
    async (from, to, guard) => {
      const ok = await seed('executing', from);
      await satisfyAction(guard, to, ok.actionId);
      expect(await inTransaction(db, (trx) => transitionAction(trx, ok.actionId, { to, lockedFrom: from }))).toBe(from);
      expect((await actionRow(ok.actionId)).status).toBe(to);
      const no = await seed('executing', from);
      await satisfyAction(guard, to, no.actionId);
      await violateAction(guard, no.actionId);
      const before = await actionRow(no.actionId);
      const err = await inTransaction(db, (trx) => transitionAction(trx, no.actionId, { to, lockedFrom: from }).catch((e: unknown) => e));
      expect(err).toMatchObject({ name: 'IllegalTransition', entity: 'action', from, to, missing: [guard] });
      expect(await actionRow(no.actionId)).toEqual(before);
    },
  );

  it('a stale action lockedFrom reads the status again: never a move the real status does not allow', async () => {
    const a = await seed('executing', 'succeeded');
    const before = await actionRow(a.actionId);
    // Stale `approved`: approved → running would be legal; succeeded → running is not.
    const err = await inTransaction(db, (trx) =>
      transitionAction(trx, a.actionId, { to: 'running', lockedFrom: 'approved' }).catch((e: unknown) => e),
    );
    expect(err).toMatchObject({ name: 'IllegalTransition', from: 'succeeded', to: 'running', missing: [] });
    expect(await actionRow(a.actionId)).toEqual(before);
    // Stale and equal to the target (a repeat would write nothing): the real status is read and moves.
    const r = await seed('executing', 'running');
    await operation(r.actionId, 'failed_unknown');
    expect(
      await inTransaction(db, (trx) => transitionAction(trx, r.actionId, { to: 'failed_unknown', lockedFrom: 'failed_unknown' })),
    ).toBe('running');
    expect((await actionRow(r.actionId)).status).toBe('failed_unknown');
    // Stale and outside onlyFrom: the real status, which onlyFrom allows, moves.
    const p = await seed('executing', 'pending_approval');
    await satisfyAction('approval_granted', 'approved', p.actionId);
    expect(
      await inTransaction(db, (trx) =>
        transitionAction(trx, p.actionId, { to: 'approved', onlyFrom: ['pending_approval'], lockedFrom: 'approved' }),
      ),
    ).toBe('pending_approval');
    expect((await actionRow(p.actionId)).status).toBe('approved');
  });
});

describe('the workflow event a transition writes (ADR 0540: built in SQL by the same statement)', () => {
  /** The stored events of a run after `seq`, parsed with the public contract's schema, and their webhook bodies. */
  async function eventsAfter(workflowId: string, seq: number) {
    const events = (await readWorkflowEvents(db, workflowId, seq)).map((e) => WorkflowEventSchema.parse(JSON.parse(e.json)));
    const bodies = await db
      .selectFrom('webhook_deliveries')
      .select(['event_seq', 'body'])
      .where('workflow_id', '=', workflowId)
      .where('event_seq', '>', seq)
      .orderBy('event_seq')
      .execute();
    return { events, bodies };
  }

  it('shows the moved state, the state before, the actions and open approvals as the API reads them, and is the webhook body', async () => {
    const a = await seed('awaiting_approval', 'approved');
    const endpoint = await db
      .insertInto('webhook_endpoints')
      .values({ tenant: 'quillfeather', url: 'http://127.0.0.1:9/hook', secret: 'whsec_test', created_by: 'test' })
      .returning('id')
      .executeTakeFirstOrThrow();
    const { event_seq: before } = await row(a.workflowId);
    const startedMs = Date.now();
    expect(await inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'executing', nextStep: 'paying' }))).toBe(
      'awaiting_approval',
    );
    const { events, bodies } = await eventsAfter(a.workflowId, before);
    const view = await readActionsView(db, a.workflowId);
    expect(events).toHaveLength(1);
    const e = events[0]!;
    expect(e).toMatchObject({
      type: 'workflow.updated',
      workflowId: a.workflowId,
      seq: before + 1,
      state: 'executing',
      previousState: 'awaiting_approval',
      terminal: false,
      nextStep: 'paying',
      stopReason: null,
    });
    expect(e.actions).toEqual(
      view.actions.map((x) => ({
        actionId: x.actionId,
        tool: x.tool,
        target: x.target,
        version: x.version,
        decision: x.decision,
        ruleId: x.ruleId,
        status: x.status,
      })),
    );
    expect(e.pendingApprovals).toHaveLength(1);
    expect(e.pendingApprovals).toEqual(view.pendingApprovals.map(({ actionDigest: _d, ...p }) => p));
    // `at`: the instant of the transition, as Date#toISOString writes it
    expect(new Date(e.at).toISOString()).toBe(e.at);
    expect(Math.abs(new Date(e.at).getTime() - startedMs)).toBeLessThan(60_000);
    // one delivery per active endpoint of the tenant, whose body is the stored event
    expect(bodies).toEqual([{ event_seq: before + 1, body: expect.any(String) }]);
    expect(WorkflowEventSchema.parse(JSON.parse(bodies[0]!.body))).toEqual(e);
    await db.deleteFrom('webhook_deliveries').where('endpoint_id', '=', endpoint.id).execute();
    await db.deleteFrom('webhook_endpoints').where('id', '=', endpoint.id).execute();
  });

  it('a terminal move says so; a move that is not taken writes no event; the intake event has no state before', async () => {
    const a = await seed('executing', 'succeeded');
    const { event_seq: before } = await row(a.workflowId);
    expect(
      await inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'completed', onlyFrom: ['investigating'] })),
    ).toBeNull();
    expect((await eventsAfter(a.workflowId, before)).events).toEqual([]);
    await inTransaction(db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'completed' }));
    expect((await eventsAfter(a.workflowId, before)).events).toMatchObject([
      { seq: before + 1, state: 'completed', previousState: 'executing', terminal: true },
    ]);
    const first = await inTransaction(db, (trx) => recordWorkflowEvent(trx, a.workflowId, null));
    expect(first).toBe(before + 2);
    expect((await eventsAfter(a.workflowId, before + 1)).events).toMatchObject([
      { seq: before + 2, state: 'completed', previousState: null },
    ]);
  });
});
