import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { checkWorkingTime, creditWait, inTransaction, outageNextStep, type OutagePolicy, readOutagePolicy } from '../src/index.ts';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// The run's working time (ADR 0015, 0110): waits are credited to the deadline once, outages up
// to a ceiling. Against a real ledger; spans are set in the database, never waited for.

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const POLICY: OutagePolicy = { ceilingMs: 60_000, credit: true };

/** A fresh run whose deadline is `deadlineInS` seconds from now, nothing credited yet. */
async function run(deadlineInS: number): Promise<string> {
  const { workflowId } = await createAction(t.db, { orderId: 'O-1001', amountCents: 1000 });
  await sql`update budgets set deadline_at = now() + make_interval(secs => ${deadlineInS}), wait_credited_until = null
            where workflow_id = ${workflowId}`.execute(t.db);
  return workflowId;
}

/** Seconds from now to the run's deadline. */
async function remainingS(workflowId: string): Promise<number> {
  const r = await sql<{
    s: number;
  }>`select extract(epoch from deadline_at - now()) as s from budgets where workflow_id = ${workflowId}`.execute(t.db);
  return Number(r.rows[0]!.s);
}

const secondsAgo = (s: number): Date => new Date(Date.now() - s * 1000);

describe('creditWait', () => {
  it('credits the span since `since`, and an overlapping wait only the part not yet credited', async () => {
    const id = await run(4);
    await inTransaction(t.db, (trx) => creditWait(trx, id, secondsAgo(30)));
    expect(await remainingS(id)).toBeGreaterThan(30);
    const after = await remainingS(id);
    // A second wait that began 20 s ago lies inside the credited span: only the instants since
    // the first credit are added, not its 20 s again.
    await inTransaction(t.db, (trx) => creditWait(trx, id, secondsAgo(20)));
    expect(await remainingS(id)).toBeLessThan(after + 5);
  });
});

describe('checkWorkingTime', () => {
  it('without an outage, a passed deadline is budget_exhausted', async () => {
    const id = await run(-5);
    expect(await inTransaction(t.db, (trx) => checkWorkingTime(trx, id, undefined, POLICY))).toEqual({ kind: 'budget_exhausted' });
  });

  it('an outage the step waited through is credited first: the same passed deadline is ok', async () => {
    const id = await run(-5);
    const outage = { dependency: 'model' as const, sinceMs: secondsAgo(20).getTime() };
    expect(await inTransaction(t.db, (trx) => checkWorkingTime(trx, id, outage, POLICY))).toMatchObject({ kind: 'ok' });
    expect(await remainingS(id)).toBeGreaterThan(10);
  });

  it('an outage past the ceiling is dependency_unavailable, naming the dependency, whatever the deadline', async () => {
    const id = await run(3600);
    const outage = { dependency: 'postgres' as const, sinceMs: secondsAgo(61).getTime() };
    const v = await inTransaction(t.db, (trx) => checkWorkingTime(trx, id, outage, POLICY));
    expect(v).toEqual({ kind: 'dependency_unavailable', dependency: 'postgres', nextStep: outageNextStep('postgres', 60_000) });
    expect(outageNextStep('postgres', 60_000)).toMatch(/^The ledger database was unavailable for more than 1 min/);
  });

  it('control removed: with the credit off the outage counts as working time (budget_exhausted)', async () => {
    const id = await run(-5);
    const outage = { dependency: 'model' as const, sinceMs: secondsAgo(20).getTime() };
    const v = await inTransaction(t.db, (trx) => checkWorkingTime(trx, id, outage, { ...POLICY, credit: false }));
    expect(v).toEqual({ kind: 'budget_exhausted' });
  });
});

describe('readOutagePolicy', () => {
  it('the credit switch is refused outside GATEHOUSE_ENV=test', () => {
    expect(readOutagePolicy(1000, {})).toEqual({ ceilingMs: 1000, credit: true });
    expect(readOutagePolicy(1000, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_OUTAGE_CREDIT: '1' }).credit).toBe(false);
    expect(() => readOutagePolicy(1000, { GATEHOUSE_TEST_DISABLE_OUTAGE_CREDIT: '1' })).toThrow(/GATEHOUSE_ENV=test/);
  });
});
