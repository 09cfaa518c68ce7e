import { randomBytes } from 'node:crypto';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadReleaseManifest } from '@gatehouse/contracts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { processTurn } from '../src/jobs/turns.processor.ts';
import { tenantSpendToday } from '../src/domain/tenant-spend.ts';
import { submittedRun, turnDeps } from './support/turn-run.ts';

// A follow-up that arrives while the model answers throws that answer away and re-runs the round
// (ADR 0676's storm), but the answer was paid for. The tenant's daily model-spend cap (ADR 0183)
// must count it (ADR 0680): a tenant whose cap is reached only by discarded answers is stopped at
// the cap, `budget_exhausted` with the cap's next step, and sends no further model request.

let t: TestDatabase;
const price = loadReleaseManifest('rel-1').model;
/** One answer's usage: 10 000 input and 1 000 output tokens. */
const USAGE = { input_tokens: 10_000, output_tokens: 1_000, total_tokens: 11_000 };
const ANSWER_MICRO_USD = Math.ceil(
  (USAGE.input_tokens * price.inputMicroUsdPer1kTokens + USAGE.output_tokens * price.outputMicroUsdPer1kTokens) / 1000,
);

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** A run just submitted by `tenant` (state `received`, round 0, its ticket text), with a spend budget far above the tenant's cap. */
const submitted = (tenant: string): Promise<string> => submittedRun(t.db, { tenant, maxSpendMicroUsd: 100 * ANSWER_MICRO_USD });

async function userMessage(workflowId: string, round: number, text: string): Promise<void> {
  await t.db
    .insertInto('conversation_items')
    .values({ workflow_id: workflowId, round, kind: 'user_message', call_id: null, item: JSON.stringify({ role: 'user', content: text }) })
    .execute();
}

/**
 * A model that answers a plain message with {@link USAGE}; while it answers its first
 * `followUps` requests, the requester sends a follow-up (so those answers are discarded), and
 * `during`, when given, runs while it answers each request.
 */
function model(workflowId: string, followUps: number, during?: () => Promise<void>): { client: OpenAI; requests: () => number } {
  let n = 0;
  const create = async () => {
    n++;
    if (n <= followUps) await userMessage(workflowId, 0, `Note ${n}.`);
    await during?.();
    return {
      id: `resp_${randomBytes(6).toString('hex')}`,
      model: price.name,
      output_text: `answer ${n}`,
      output: [
        {
          type: 'message',
          id: `msg_${n}`,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: `answer ${n}`, annotations: [] }],
        },
      ],
      usage: USAGE,
    };
  };
  return { client: { responses: { create } } as unknown as OpenAI, requests: () => n };
}

const deps = (client: OpenAI, dailyMicroUsd: number) => turnDeps(t.db, client, { dailyMicroUsd, logName: 'agent-loop-tenant-cap-test' });

const run = (id: string) =>
  t.db
    .selectFrom('workflows as w')
    .innerJoin('budgets as b', 'b.workflow_id', 'w.id')
    .select(['w.state', 'w.stop_reason', 'w.next_step', 'b.spend_micro_usd', 'b.max_spend_micro_usd'])
    .where('w.id', '=', id)
    .executeTakeFirstOrThrow();

describe('the tenant’s daily model-spend cap counts answers discarded for a follow-up', () => {
  it('a tenant whose cap only discarded answers reach is stopped at the cap, and its next run sends no model request', async () => {
    const tenant = `tenant-${randomBytes(4).toString('hex')}`;
    const cap = 2 * ANSWER_MICRO_USD; // two answers' worth
    // Two follow-ups, each during a model call of round 1: both answers are discarded, nothing is recorded.
    const first = await submitted(tenant);
    const m = model(first, 2);
    expect(await processTurn({ release: 'rel-1', workflowId: first, round: 1 }, deps(m.client, cap))).toBe('budget_exhausted');
    // Stopped at the cap before a third request: the cap's reason, not the run's own spend budget.
    expect(m.requests()).toBe(2);
    const stopped = await run(first);
    expect([stopped.state, stopped.stop_reason]).toEqual(['stopped', 'budget_exhausted']);
    expect(stopped.next_step).toMatch(/daily model-spend cap/);
    expect(Number(stopped.spend_micro_usd)).toBe(2 * ANSWER_MICRO_USD);
    expect(Number(stopped.spend_micro_usd)).toBeLessThan(Number(stopped.max_spend_micro_usd));
    const turns = await t.db.selectFrom('model_turns').select('round').where('workflow_id', '=', first).execute();
    expect(turns).toEqual([]);
    const kept = await t.db.selectFrom('discarded_model_answers').select(['round', 'reason']).where('workflow_id', '=', first).execute();
    expect(kept).toEqual([
      { round: 1, reason: 'follow_up' },
      { round: 1, reason: 'follow_up' },
    ]);
    // The tenant's spend today, as the cap reads it, is what the run paid for.
    expect(await tenantSpendToday(t.db, tenant, price)).toBe(2 * ANSWER_MICRO_USD);

    // Another run of the same tenant the same day stops before its first model request.
    const second = await submitted(tenant);
    const m2 = model(second, 0);
    expect(await processTurn({ release: 'rel-1', workflowId: second, round: 1 }, deps(m2.client, cap))).toBe('budget_exhausted');
    expect(m2.requests()).toBe(0);
    expect(await run(second)).toMatchObject({
      state: 'stopped',
      stop_reason: 'budget_exhausted',
      next_step: expect.stringMatching(/daily model-spend cap/),
    });

    // Another tenant is not charged for them: its run completes.
    const other = await submitted(`tenant-${randomBytes(4).toString('hex')}`);
    const m3 = model(other, 0);
    expect(await processTurn({ release: 'rel-1', workflowId: other, round: 1 }, deps(m3.client, cap))).toBe('recorded');
    expect(await run(other)).toMatchObject({ state: 'completed', stop_reason: null });
  });

  it('an answer that arrives after its run ended is counted too (the run stopped while the model answered)', async () => {
    const tenant = `tenant-${randomBytes(4).toString('hex')}`;
    const id = await submitted(tenant);
    const stop = async () => {
      await t.db.updateTable('workflows').set({ state: 'stopped', stop_reason: 'dependency_unavailable' }).where('id', '=', id).execute();
    };
    const m = model(id, 0, stop);
    expect(await processTurn({ release: 'rel-1', workflowId: id, round: 1 }, deps(m.client, 100 * ANSWER_MICRO_USD))).toBe('recorded');
    expect(m.requests()).toBe(1);
    expect(await tenantSpendToday(t.db, tenant, price)).toBe(ANSWER_MICRO_USD);
    expect(Number((await run(id)).spend_micro_usd)).toBe(ANSWER_MICRO_USD);
    const kept = await t.db.selectFrom('discarded_model_answers').select(['round', 'reason']).where('workflow_id', '=', id).execute();
    expect(kept).toEqual([{ round: 1, reason: 'round_closed' }]);
  });
});
