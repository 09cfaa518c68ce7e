import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, deadlockCount, type SeededAction } from '@gatehouse/testing';
import type { ExecutionJob } from '@gatehouse/contracts';
import { LeaseBusy, processExecution } from '@gatehouse/executor';
import { startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0620-the-claim-in-two-statements.md: the run's move to `executing` and its
// workflow event ride on the grant, built from the state the checks' statement read under the
// run's lock (`lockedFrom`). Two actions of one run, each delivered twice, all four executions
// started in the same tick (× TRIALS): each action is granted once (one `operation.claimed`, one
// refund), and the run's events have distinct, gapless seqs whose `previousState` is the state of
// the event before — the second grant must not build its event on a state the first one changed.

const TRIALS = Number(process.env.CLAIM_EVENTS_TRIALS ?? 30);

let h: Harness;
let orderId: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12, deadlockTimeoutMs: 20 });
  orderId = await h.newOrder();
});
afterAll(async () => {
  await h?.close();
});

/** A second approved ALLOW refund (version 2) in the run of `a`, sharing its proposal. */
async function secondAction(a: SeededAction): Promise<{ job: ExecutionJob; actionId: string; operationKey: string }> {
  const first = await h.db.selectFrom('actions').selectAll().where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const id = randomUUID();
  const operationKey = `${a.workflowId}:action:2`;
  await h.db
    .insertInto('actions')
    .values({
      ...first,
      id,
      version: 2,
      call_id: `call_${randomBytes(8).toString('hex')}`,
      digest: randomBytes(32).toString('hex'),
      operation_key: operationKey,
      arguments: JSON.stringify(first.arguments),
      facts: JSON.stringify(first.facts ?? {}),
      created_at: undefined,
      updated_at: undefined,
    } as never)
    .execute();
  return { job: { ...a.job, actionId: id, actionVersion: 2, approvalId: null }, actionId: id, operationKey };
}

describe('claims of two actions of one run, each delivered twice (ADR 0620)', () => {
  it.each(['executing', 'investigating'] as const)(
    `run %s, ${TRIALS} trials: one grant per action, the run's events gapless with their previous states`,
    async (state) => {
      const before = await deadlockCount(h.db, h.tdb.name);
      const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
      const anomalies: string[] = [];
      for (let i = 0; i < TRIALS; i++) {
        const a = await createAction(h.db, { orderId, amountCents: 1000, budgetMs: 600_000 });
        const b = await secondAction(a);
        if (state !== 'executing') await h.db.updateTable('workflows').set({ state }).where('id', '=', a.workflowId).execute();
        const jobs = [a.job, b.job, a.job, b.job];
        const settled = await Promise.allSettled(jobs.map((j) => processExecution(j, deps)));
        const unexpected = settled.filter(
          (s) =>
            !(s.status === 'fulfilled' && ['succeeded', 'replay:succeeded'].includes(s.value)) &&
            !(s.status === 'rejected' && s.reason instanceof LeaseBusy),
        );
        if (unexpected.length)
          anomalies.push(`trial ${i}: ${JSON.stringify(unexpected.map((s) => (s.status === 'fulfilled' ? s.value : String(s.reason))))}`);
        const claimed = (await h.db.selectFrom('audit_outbox').select('event').execute())
          .map((r) => r.event as Record<string, unknown>)
          .filter((e) => e.type === 'operation.claimed' && e.runId === a.workflowId);
        if (claimed.length !== 2) anomalies.push(`trial ${i}: ${claimed.length} operation.claimed events`);
        for (const key of [a.operationKey, b.operationKey]) {
          const sent = await h.staging.selectFrom('staging.request_log').select('status').where('idempotency_key', '=', key).execute();
          if (sent.length !== 1) anomalies.push(`trial ${i}: ${sent.length} requests for ${key}`);
        }
        const events = await h.db
          .selectFrom('workflow_events')
          .select(['seq', 'state', 'payload'])
          .where('workflow_id', '=', a.workflowId)
          .orderBy('seq')
          .execute();
        const wf = await h.db
          .selectFrom('workflows')
          .select(['state', 'event_seq'])
          .where('id', '=', a.workflowId)
          .executeTakeFirstOrThrow();
        // one event per grant (the run's move rides on it), none for a refused or replayed delivery
        if (events.length !== 2) anomalies.push(`trial ${i}: ${events.length} workflow events`);
        if (Number(wf.event_seq) !== Number(events.at(-1)?.seq ?? 0)) anomalies.push(`trial ${i}: event_seq ${wf.event_seq}`);
        let previous: string = state;
        for (const [k, ev] of events.entries()) {
          const p = ev.payload as Record<string, unknown>;
          if (k > 0 && Number(ev.seq) !== Number(events[k - 1]!.seq) + 1) anomalies.push(`trial ${i}: seq gap at ${ev.seq}`);
          if (p.previousState !== previous)
            anomalies.push(`trial ${i}: event ${ev.seq} previousState ${String(p.previousState)}, was ${previous}`);
          if (p.seq !== Number(ev.seq)) anomalies.push(`trial ${i}: event ${ev.seq} payload seq ${String(p.seq)}`);
          previous = ev.state;
        }
        if (previous !== 'executing') anomalies.push(`trial ${i}: last event ${previous}`);
      }
      expect(anomalies).toEqual([]);
      expect(await deadlockCount(h.db, h.tdb.name)).toBe(before);
    },
    120_000,
  );
});
