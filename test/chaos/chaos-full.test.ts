import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from '@gatehouse/cli';
import { startChaosStack, type ChaosStack } from './support/chaos-stack.ts';
import { auditDown, backendTerminationWaves, killService, postgresRestart, redisRestart, type Fault } from './support/faults.ts';
import { saveResults, writeReport } from './support/report.ts';
import { runFault, type FaultResult } from './support/run-fault.ts';

// The whole chaos suite, run by `./run chaos` (CHAOS=full): each fault under load on a stack of
// its own (private Postgres cluster and Redis), then the same invariants within a stated bound
// after recovery; prints a table and writes test-results/chaos-full.json. The normal test run
// skips it (its short version is test/chaos/chaos.test.ts).

/** How long runs get to settle after the infrastructure is back (`CHAOS_RECOVERY_BOUND_MS` overrides). */
const RECOVERY_BOUND_MS = Number(process.env.CHAOS_RECOVERY_BOUND_MS ?? 120_000);
/** Per fault: stack start (≤ 150 s per service on a loaded machine), load, fault, bound and checks. */
const FAULT_TIMEOUT_MS = 900_000;

const results: FaultResult[] = [];
afterAll(() => {
  if (results.length) writeReport('full', results);
});

async function onOwnStack(fault: Fault, tag: string): Promise<FaultResult> {
  const s = await startChaosStack();
  try {
    const r = await runFault(s, fault, { tag, recoveryBoundMs: RECOVERY_BOUND_MS });
    results.push(r);
    saveResults('full', results);
    return r;
  } finally {
    await s.close();
  }
}

describe.runIf(process.env.CHAOS === 'full')('chaos, full suite', () => {
  it('postgres restart -m fast under load', { timeout: FAULT_TIMEOUT_MS }, async () => {
    expect((await onOwnStack(postgresRestart(12), 'pg')).failures).toEqual([]);
  });

  it('pg_terminate_backend waves on the stack database every 2 s for 20 s under load', { timeout: FAULT_TIMEOUT_MS }, async () => {
    expect((await onOwnStack(backendTerminationWaves(12), 'term')).failures).toEqual([]);
  });

  it(
    'redis restarted without persistence with ≥ 30 runs in flight and an approved execution delayed',
    { timeout: FAULT_TIMEOUT_MS },
    async () => {
      expect((await onOwnStack(redisRestart(36, 30), 'redis')).failures).toEqual([]);
    },
  );

  it('audit down for 30 s under load', { timeout: FAULT_TIMEOUT_MS }, async () => {
    expect((await onOwnStack(auditDown(12), 'audit')).failures).toEqual([]);
  });

  describe('kill -9 of each service in turn under load, then restart', () => {
    let s: ChaosStack;
    beforeAll(async () => {
      s = await startChaosStack();
    }, 300_000);
    afterAll(async () => {
      await s?.close();
    });
    for (const { name } of SERVICES) {
      it(`kill -9 ${name}`, { timeout: FAULT_TIMEOUT_MS }, async () => {
        const r = await runFault(s, killService(name, 6), { tag: `kill-${name}`, recoveryBoundMs: RECOVERY_BOUND_MS });
        results.push(r);
        saveResults('full', results);
        expect(r.failures).toEqual([]);
      });
    }
  });
});
