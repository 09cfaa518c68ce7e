import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, deadlockCount, type SeededAction } from '@gatehouse/testing';
import { LeaseBusy, processExecution } from '@gatehouse/executor';
import { stopRunOnFailedStep } from '@gatehouse/ledger';
import { EXECUTIONS_QUEUE, startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0620-the-claim-in-two-statements.md: the claim locks the run, then the action,
// then reserves the operation (one statement), and grants with the run's move riding on the
// grant. A stop of the same run (ADR 0610: it ends the run's unclaimed actions and voids their
// approvals) races it here behind a barrier, its start spread over the claim's window. Either the
// claim wins (its effect is sent once, its `operation.claimed` written before `run.stopped`) or
// the stop wins (the claim is skipped, the action superseded, nothing sent, no operation left
// running) — never a deadlock, never an effect after the stop, never an approval both voided and
// consumed.

const TRIALS = Number(process.env.CLAIM_STOP_TRIALS ?? 30);

let h: Harness;
let orderId: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12, deadlockTimeoutMs: 20 });
  orderId = await h.newOrder();
});
afterAll(async () => {
  await h?.close();
});

const outcomes = new Map<string, number>();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One trial: the execution and the stop started together, the stop delayed by `delayMs`. */
async function trial(a: SeededAction, delayMs: number): Promise<string[]> {
  // The re-evaluation is off: the race under test is the claim's against the stop, not the limits'.
  const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
  const [exec, stop] = await Promise.allSettled([
    processExecution(a.job, deps),
    sleep(delayMs).then(() => stopRunOnFailedStep(h.db, a.workflowId, EXECUTIONS_QUEUE, 'executor')),
  ]);
  const anomalies: string[] = [];
  if (exec.status === 'rejected' && !(exec.reason instanceof LeaseBusy)) anomalies.push(`execution threw ${String(exec.reason)}`);
  if (stop.status === 'rejected') anomalies.push(`stop threw ${String(stop.reason)}`);
  const wf = await h.db.selectFrom('workflows').select(['state']).where('id', '=', a.workflowId).executeTakeFirstOrThrow();
  const action = await h.db.selectFrom('actions').select(['status']).where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const op = await h.db.selectFrom('operations').select(['status']).where('key', '=', a.operationKey).executeTakeFirst();
  const sent = await h.staging.selectFrom('staging.request_log').select('status').where('idempotency_key', '=', a.operationKey).execute();
  const events = (await h.db.selectFrom('audit_outbox').select(['id', 'event']).orderBy('id').execute())
    .map((r) => ({ id: Number(r.id), e: r.event as Record<string, unknown> }))
    .filter((r) => r.e.runId === a.workflowId);
  const first = (type: string) => events.find((r) => r.e.type === type)?.id ?? null;
  const claimed = events.filter((r) => r.e.type === 'operation.claimed').length;
  const stoppedAt = first('run.stopped');
  if (wf.state !== 'stopped') anomalies.push(`run ${wf.state}`);
  if (op?.status === 'running' || op?.status === 'pending') anomalies.push(`operation left ${op.status}`);
  if (sent.length > 1) anomalies.push(`${sent.length} effects`);
  if (sent.length === 1) {
    // claim won: the grant committed before the stop
    if (claimed !== 1) anomalies.push(`effect sent with ${claimed} claims`);
    if (stoppedAt !== null && (first('operation.claimed') ?? Infinity) > stoppedAt) anomalies.push('effect claimed after the stop');
    if (action.status !== 'succeeded' || op?.status !== 'succeeded')
      anomalies.push(`effect sent, action ${action.status}, op ${op?.status}`);
  } else {
    // stop won: nothing claimed, the action ended with its run
    if (claimed !== 0) anomalies.push(`no effect but ${claimed} claims`);
    if (action.status !== 'superseded') anomalies.push(`no effect, action ${action.status}`);
    if (op) anomalies.push(`no effect, operation ${op.status} left`);
  }
  if (a.approvalId) {
    const ap = await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId).executeTakeFirstOrThrow();
    const consumed = events.filter((r) => r.e.type === 'approval.consumed').length;
    const voided = events.filter((r) => r.e.type === 'approval.voided').length;
    if (consumed > 1 || consumed + voided !== 1) anomalies.push(`approval ${ap.status}: consumed ${consumed}, voided ${voided}`);
    if (sent.length && ap.status !== 'used') anomalies.push(`effect with approval ${ap.status}`);
    if (!sent.length && ap.status !== 'void') anomalies.push(`no effect, approval ${ap.status}`);
  }
  const outcome = exec.status === 'fulfilled' ? exec.value : String(exec.reason);
  if (process.env.RACE_VERBOSE) outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
  return anomalies.map((x) => `${x} (execution: ${outcome}, delay ${delayMs} ms)`);
}

describe('claim against a stop of its run (ADR 0620, ADR 0610)', () => {
  it.each([
    ['an ALLOW refund', 3000],
    ['an approved refund', 6000],
  ])(
    `%s, ${TRIALS} trials: the claim or the stop wins, never both, never a deadlock`,
    async (_, amountCents) => {
      const before = await deadlockCount(h.db, h.tdb.name);
      const anomalies: string[] = [];
      const winners = { claim: 0, stop: 0 };
      for (let i = 0; i < TRIALS; i++) {
        const a = await createAction(h.db, { orderId, amountCents, budgetMs: 600_000 });
        const found = await trial(a, (i * 7) % 40);
        anomalies.push(...found.map((f) => `trial ${i}: ${f}`));
        const sent = await h.staging
          .selectFrom('staging.request_log')
          .select('status')
          .where('idempotency_key', '=', a.operationKey)
          .execute();
        winners[sent.length ? 'claim' : 'stop']++;
      }
      if (process.env.RACE_VERBOSE) console.info(`winners: ${JSON.stringify(winners)} outcomes: ${JSON.stringify([...outcomes])}`);
      expect(anomalies).toEqual([]);
      expect(await deadlockCount(h.db, h.tdb.name)).toBe(before);
      // both sides won some trials, so the race was run
      expect(winners.claim).toBeGreaterThan(0);
      expect(winners.stop).toBeGreaterThan(0);
    },
    120_000,
  );
});
