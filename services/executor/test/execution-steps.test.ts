import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { createLogger } from '@gatehouse/platform';
import { DependencyUnavailable, inTransaction, raiseFence } from '@gatehouse/ledger';
import { loadActiveBundles } from '@gatehouse/policy';
import { toJobResult, type ExecutionOutcome } from '../src/domain/execution-outcome.ts';
import type { ExecutionDeps } from '../src/jobs/execution-deps.ts';
import { holdIfSwitchedOff, loadExecutionContext } from '../src/jobs/steps/containment.step.ts';
import { gateOnAuditHealth } from '../src/jobs/steps/audit-gate.step.ts';
import { claim, dispatchEffect, type Claimed } from '../src/jobs/steps/dispatch.step.ts';
import { recordResult } from '../src/jobs/steps/record.step.ts';
import { readTestHooks } from '../src/domain/test-hooks.ts';

// Each step of processExecution alone (docs/decisions/0270-one-operation-protocol.md), against a
// real test database. No system of record runs here: the steps that would call one are given an
// adapter that counts its calls (deny paths assert zero).

let tdb: TestDatabase;
let deps: ExecutionDeps;
const published: unknown[] = [];
beforeAll(async () => {
  tdb = await createTestDatabase();
  await tdb.db.insertInto('audit_heartbeat').values({ id: 1, beat_at: new Date() }).execute();
  const log = createLogger('executor-steps-test');
  log.level = 'silent';
  deps = {
    db: tdb.db,
    relay: { publish: async (rows: unknown[]) => void published.push(...rows) } as unknown as ExecutionDeps['relay'],
    log,
    stagingUrl: 'http://127.0.0.1:9',
    signingKey: null as unknown as ExecutionDeps['signingKey'],
    auditHmacKey: 'k',
    leaseMs: 60_000,
    deadlineMs: 1_000,
    agentId: 'support-agent',
    hooks: readTestHooks({}),
    bundles: loadActiveBundles({ support: 'support-p1', change: 'change-c1' }),
    auditGate: { maxHeartbeatAgeMs: 60_000, maxBacklogAgeMs: 60_000 },
    outagePolicy: { ceilingMs: 15 * 60_000, credit: true },
  };
});
afterAll(async () => {
  await tdb?.drop();
});

const state = async (id: string) =>
  (await tdb.db.selectFrom('workflows').select('state').where('id', '=', id).executeTakeFirstOrThrow()).state;

describe('outcome → queue action (one place)', () => {
  const errors = { busy: (m: string) => new Error(`busy ${m}`), retrySafe: (m: string) => new Error(`repeat ${m}`) };
  it('maps each outcome kind to the job value or the error to throw', () => {
    const cases: Array<[ExecutionOutcome, string]> = [
      [{ kind: 'executed', status: 'succeeded' }, 'succeeded'],
      [{ kind: 'replayed', status: 'failed_unknown' }, 'replay:failed_unknown'],
      [{ kind: 'held', reason: 'tool_disabled' }, 'held:tool_disabled'],
      [{ kind: 'refused', reason: 'deadline' }, 'refused:deadline'],
      [{ kind: 'skipped', reason: 'operation_frozen' }, 'skip:operation_frozen'],
      [{ kind: 'conflict' }, 'conflict'],
      [{ kind: 'reevaluated', outcome: 'DENY' }, 'reevaluated:DENY'],
      [{ kind: 'fenced_out' }, 'fenced_out'],
    ];
    for (const [o, value] of cases) expect(toJobResult(o, errors)).toEqual({ value });
    expect(toJobResult({ kind: 'busy', actionId: 'a1' }, errors)).toEqual({
      error: new Error('busy operation of action a1 is leased by another worker'),
    });
    const down = new DependencyUnavailable('audit', 'x');
    expect(toJobResult({ kind: 'waiting', error: down }, errors)).toEqual({ error: down });
  });
});

describe('containment step', () => {
  it('a switched-off tool: held, the run paused and audited, nothing claimed; switched on: goes on', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-S1' });
    await tdb.db
      .insertInto('tool_switches')
      .values({ tool: 'issue_refund', enabled: false, changed_by: 'ops-gus', changed_at: new Date() })
      .execute();
    try {
      const ctx = await loadExecutionContext(tdb.db, a.job);
      expect(await holdIfSwitchedOff(tdb.db, ctx, deps.hooks)).toEqual({ kind: 'held', reason: 'tool_disabled' });
      expect(await state(a.workflowId)).toBe('paused');
      expect(await tdb.db.selectFrom('operations').select('key').where('key', '=', a.operationKey).execute()).toHaveLength(0);
      // control removed: judged as at admission (switched after it), the step would go on
      expect(await holdIfSwitchedOff(tdb.db, ctx, { ...deps.hooks, switchAtAdmissionOnly: true })).toBeNull();
      // control removed (GATEHOUSE_TEST_DISABLE_SWITCH): not checked at all, the step goes on
      expect(await holdIfSwitchedOff(tdb.db, ctx, { ...deps.hooks, ignoreSwitch: true })).toBeNull();
    } finally {
      await tdb.db.deleteFrom('tool_switches').where('tool', '=', 'issue_refund').execute();
    }
    const b = await createAction(tdb.db, { orderId: 'O-S2' });
    expect(await holdIfSwitchedOff(tdb.db, await loadExecutionContext(tdb.db, b.job), deps.hooks)).toBeNull();
  });
});

describe('audit gate step', () => {
  it('unhealthy audit storage holds a consequential step (waiting on audit); healthy: goes on', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-G1' });
    expect(await gateOnAuditHealth(deps, await loadExecutionContext(tdb.db, a.job))).toBeNull();
    await tdb.db
      .updateTable('audit_heartbeat')
      .set({ beat_at: new Date(Date.now() - 3_600_000) })
      .execute();
    try {
      const held = await gateOnAuditHealth(deps, await loadExecutionContext(tdb.db, a.job));
      expect(held).toMatchObject({ kind: 'waiting', error: { name: 'AuditUnavailable', dependency: 'audit' } });
    } finally {
      await tdb.db.updateTable('audit_heartbeat').set({ beat_at: new Date() }).execute();
    }
  });
});

describe('dispatch and record steps', () => {
  const noReads = { epoch: 1, baseline: null, record: null };

  it('claims once (a second claim is busy); a fenced-out holder never calls the adapter and records nothing', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-D1' });
    const ctx = await loadExecutionContext(tdb.db, a.job);
    const c = await claim(deps, ctx, noReads);
    expect(c).toMatchObject({ kind: 'claimed', fencingToken: 1, reclaimed: false });
    expect(await claim(deps, ctx, noReads)).toEqual({ kind: 'busy' });
    // a newer holder takes over: the old holder's write-ahead mark is refused, no downstream call
    await tdb.db
      .updateTable('operations')
      .set({ lease_expires_at: new Date(0) })
      .where('key', '=', a.operationKey)
      .execute();
    await inTransaction(tdb.db, (trx) => raiseFence(trx, a.operationKey));
    let calls = 0;
    const counting = { ...ctx, adapter: async () => (calls++, { status: 'succeeded' as const, data: {}, evidenceRef: 'R', attempts: 1 }) };
    expect(await dispatchEffect(deps, counting, c as Claimed, 1, Date.now())).toEqual({ kind: 'fenced_out' });
    expect(calls).toBe(0);
    const result = { status: 'succeeded' as const, data: { refundId: 'R-1' }, evidenceRef: 'R-1', attempts: 1 };
    expect(await recordResult(deps, ctx, c as Claimed, result, Date.now())).toEqual({ kind: 'fenced_out' });
    const op = await tdb.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op).toMatchObject({ status: 'running', result: null, evidence_ref: null });
  });

  it('writes the dispatch mark before the adapter runs, records the outcome under the fence, and a redelivery replays it', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-D2' });
    const ctx = await loadExecutionContext(tdb.db, a.job);
    const c = (await claim(deps, ctx, noReads)) as Claimed;
    let markedAtCall: Date | null = null;
    const adapter = async () => {
      markedAtCall = (
        await tdb.db.selectFrom('operations').select('dispatched_at').where('key', '=', a.operationKey).executeTakeFirstOrThrow()
      ).dispatched_at;
      return { status: 'unknown' as const, reason: 'timeout', attempts: 1 };
    };
    const raw = await dispatchEffect(deps, { ...ctx, adapter }, c, 1, Date.now());
    expect(markedAtCall).not.toBeNull();
    expect(await recordResult(deps, ctx, c, raw as never, Date.now())).toEqual({ kind: 'executed', status: 'failed_unknown' });
    const again = await claim(deps, ctx, noReads);
    expect(again).toMatchObject({ kind: 'replay', operation: { status: 'failed_unknown' } });
  });

  it('a proven non-effect resets to pending (retry_safe) and the next claim is a reclaim with a higher fence', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-D3' });
    const ctx = await loadExecutionContext(tdb.db, a.job);
    const c = (await claim(deps, ctx, noReads)) as Claimed;
    const out = await recordResult(deps, ctx, c, { status: 'retry_safe', reason: 'connection_refused', attempts: 1 }, Date.now());
    expect(out).toEqual({ kind: 'retry_safe', tool: 'issue_refund', reason: 'connection_refused' });
    expect(await claim(deps, ctx, noReads)).toMatchObject({ kind: 'claimed', fencingToken: 2, previouslyDispatched: false });
  });
});
