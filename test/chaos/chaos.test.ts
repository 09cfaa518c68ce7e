import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { startChaosStack, type ChaosStack } from './support/chaos-stack.ts';
import { postgresRestart, redisRestart } from './support/faults.ts';
import { checkAuditChain, checkEffects, checkReconciliation, isSettled, runStates } from './support/invariants.ts';
import { planRuns, submitRun } from './support/load.ts';
import { saveResults, writeReport } from './support/report.ts';
import { runFault, type FaultResult } from './support/run-fault.ts';

// The short chaos run of the normal test run: one Postgres restart and one Redis restart (with
// an approved execution held in the delayed set) under a small load, on a private Postgres
// cluster and Redis. Every check waits on a condition with a deadline; nothing is timed.
// The whole suite: `./run chaos` (test/chaos/chaos-full.test.ts).

/** How long runs get to settle after the infrastructure is back (`CHAOS_RECOVERY_BOUND_MS` overrides). */
const RECOVERY_BOUND_MS = Number(process.env.CHAOS_RECOVERY_BOUND_MS ?? 60_000);

let s: ChaosStack;
const results: FaultResult[] = [];
beforeAll(async () => {
  s = await startChaosStack();
}, 200_000);
afterAll(async () => {
  if (results.length) writeReport('short', results);
  await s?.close();
});

describe('chaos, short: the stack survives a Postgres restart and a Redis restart under load', () => {
  it(
    'postgres restart -m fast: services alive, runs settle, one effect per key, chain intact, reconciliation clean',
    { timeout: 240_000 },
    async () => {
      const r = await runFault(s, postgresRestart(6), { tag: 'pg', recoveryBoundMs: RECOVERY_BOUND_MS });
      results.push(r);
      saveResults('short', results);
      expect(r.failures).toEqual([]);
    },
  );

  it('redis restart without persistence, an approved execution delayed: the same invariants', { timeout: 400_000 }, async () => {
    const r = await runFault(s, redisRestart(8, 6), { tag: 'redis', recoveryBoundMs: RECOVERY_BOUND_MS });
    results.push(r);
    saveResults('short', results);
    expect(r.failures).toEqual([]);
  });

  // The checks are the suite's controls: each must see a difference planted behind the product's
  // back, or a passing row would mean nothing. Runs last: it breaks the chain on purpose.
  it('the checks catch a planted duplicate refund, a stuck run and a tampered audit chain', { timeout: 180_000 }, async () => {
    const [run] = await planRuns(s, 'plant', 1);
    await submitRun(s, run!, Date.now() + 60_000);
    expect(run!.workflowId, run!.lastError ?? '').not.toBeNull();
    await sql`insert into staging.refunds (refund_id, idempotency_key, order_id, tenant, amount_cents, reason, requester, actor)
      values (${randomUUID()}, ${`planted-${randomUUID()}`}, ${run!.orderId}, 'quillfeather', 1000, 'planted', 'rep-ana', 'support-agent')`.execute(
      s.staging.db,
    );
    expect((await checkEffects(s, [run!])).duplicates.join()).toContain('under a key of no action of the run');
    expect((await checkReconciliation(s)).classes.ledger_entry_without_step).toBeGreaterThanOrEqual(1);

    await s.db.updateTable('workflows').set({ state: 'executing', next_step: null }).where('id', '=', run!.workflowId!).execute();
    expect((await runStates(s, [run!])).map(isSettled)).toEqual([false]);

    const before = await checkAuditChain(s, Date.now() + 60_000); // every event chained: seq 1 exists
    expect(before).toMatchObject({ intact: true, backlog: 0 });
    await s.db.transaction().execute(async (trx) => {
      await sql`set local session_replication_role = replica`.execute(trx); // past the append-only trigger
      await sql`update audit_log set event = event || '{"planted": true}'::jsonb where seq = 1`.execute(trx);
    });
    expect((await checkAuditChain(s, Date.now() + 30_000)).intact).toBe(false);
  });
});
