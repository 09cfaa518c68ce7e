import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { creditWait, inTransaction, transitionWorkflow } from '@gatehouse/ledger';
import { someoneWaitsOnALock } from '@gatehouse/test-harness';
import { startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0620-the-claim-in-two-statements.md: the claim's first statement locks the run
// and reads its decision context — state and wall-time deadline (`decisionContextQuery`) — then
// the action. A run paused by on-call resumes in a transaction that holds the run's lock, moves
// it `paused → executing` and credits the pause to `budgets.deadline_at` (ops.ts,
// `resumeIfNothingHeld`, with the ledger's own `transitionWorkflow` and `creditWait` here). A
// claim whose statement started while that transaction held the run waits for the lock; once
// granted, it must judge the deadline the resume wrote, as it judges the state the resume wrote.
// The pause outlasted the run's original deadline, so a claim that reads the deadline from
// before the resume refuses `budget_exhausted` and stops a run that has 15 minutes left.

const TRIALS = Number(process.env.STALE_DEADLINE_TRIALS ?? 30);

let h: Harness;
let orderId: string;
beforeAll(async () => {
  h = await startHarness({ poolSize: 12 });
  orderId = await h.newOrder();
});
afterAll(async () => {
  await h?.close();
});

/** An ALLOW refund in a run paused 20 minutes ago whose deadline passed 5 minutes ago, during the pause. */
async function pausedPastItsDeadline(): Promise<SeededAction> {
  const a = await createAction(h.db, { orderId, amountCents: 1000, budgetMs: 600_000 });
  await h.db
    .updateTable('workflows')
    .set({ state: 'paused', next_step: 'Tool issue_refund is switched off.' })
    .where('id', '=', a.workflowId)
    .execute();
  await h.db
    .updateTable('budgets')
    .set({ paused_at: new Date(Date.now() - 20 * 60_000), deadline_at: new Date(Date.now() - 5 * 60_000) })
    .where('workflow_id', '=', a.workflowId)
    .execute();
  return a;
}

/** The resume of `resumeIfNothingHeld`, its transaction held open until `release` is called. */
function resume(workflowId: string): { written: Promise<void>; release: () => void; done: Promise<void> } {
  let release!: () => void;
  let written!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const wrote = new Promise<void>((r) => (written = r));
  const done = inTransaction(h.db, async (trx) => {
    await trx.selectFrom('workflows').select('id').where('id', '=', workflowId).forUpdate().execute();
    await transitionWorkflow(trx, workflowId, {
      to: 'executing',
      nextStep: null,
      audit: { type: 'run.resumed', service: 'cli', tool: 'issue_refund', outcome: 'tool_enabled', revisions: { release: 'rel-1' } },
    });
    const budget = await trx
      .selectFrom('budgets')
      .select('paused_at')
      .where('workflow_id', '=', workflowId)
      .forUpdate()
      .executeTakeFirstOrThrow();
    await creditWait(trx, workflowId, new Date(budget.paused_at!));
    await trx.updateTable('budgets').set({ paused_at: null }).where('workflow_id', '=', workflowId).execute();
    written();
    await gate;
  });
  return { written: wrote, release, done };
}

describe('a claim waiting on a run that is resuming (ADR 0620)', () => {
  it(`the claim started after the resume committed runs the refund (control, × ${Math.min(TRIALS, 10)})`, async () => {
    const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
    const got: string[] = [];
    for (let i = 0; i < Math.min(TRIALS, 10); i++) {
      const a = await pausedPastItsDeadline();
      const r = resume(a.workflowId);
      await r.written;
      r.release();
      await r.done;
      got.push(await processExecution(a.job, deps));
    }
    expect(got.filter((g) => g !== 'succeeded')).toEqual([]);
  }, 60_000);

  it(`the claim that waited on the resume's lock judges the deadline the resume credited (× ${TRIALS})`, async () => {
    const deps = h.deps({ hooks: { ...h.deps().hooks, disableReevaluation: true } });
    const got: string[] = [];
    for (let i = 0; i < TRIALS; i++) {
      const a = await pausedPastItsDeadline();
      const r = resume(a.workflowId);
      await r.written;
      const execution = processExecution(a.job, deps);
      const waited = await someoneWaitsOnALock(h.db, 2_000);
      r.release();
      await r.done;
      const outcome = await execution;
      const wf = await h.db
        .selectFrom('workflows')
        .select(['state', 'stop_reason'])
        .where('id', '=', a.workflowId)
        .executeTakeFirstOrThrow();
      // a refusal answers the call with `stop: budget_exhausted`: the agent loop then stops the run
      const stops = await h.db
        .selectFrom('outbox')
        .select('payload')
        .where('queue', 'like', 'results.%')
        .where(sql<boolean>`payload->>'workflowId' = ${a.workflowId} and payload->>'stop' is not null`)
        .execute();
      const stop = stops.map((s) => (s.payload as { stop: string }).stop).join(',');
      got.push(`${waited ? 'waited' : 'no-wait'}: ${outcome}, run ${wf.state}${stop ? `, results job stop=${stop}` : ''}`);
    }
    if (process.env.RACE_VERBOSE) console.info(got.join('\n'));
    expect(got.filter((g) => !g.endsWith(': succeeded, run executing'))).toEqual([]);
  }, 120_000);
});
