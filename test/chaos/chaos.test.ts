import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChaosStack, type ChaosStack } from './support/chaos-stack.ts';
import { postgresRestart, redisRestart } from './support/faults.ts';
import { writeReport } from './support/report.ts';
import { runFault, type FaultResult } from './support/run-fault.ts';

// The short chaos run of the normal test run: one Postgres restart and one Redis restart (with
// an approved execution held in the delayed set) under a small load, on a private Postgres
// cluster and Redis. Every check waits on a condition with a deadline; nothing is timed.
// The whole suite: `./run chaos` (test/chaos/chaos-full.test.ts).

/** How long runs get to settle after the infrastructure is back. */
const RECOVERY_BOUND_MS = 60_000;

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
      expect(r.failures).toEqual([]);
    },
  );

  it('redis restart without persistence, an approved execution delayed: the same invariants', { timeout: 400_000 }, async () => {
    const r = await runFault(s, redisRestart(8, 6), { tag: 'redis', recoveryBoundMs: RECOVERY_BOUND_MS });
    results.push(r);
    expect(r.failures).toEqual([]);
  });
});
