import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { loadReleaseManifest, modelSpendMicroUsd } from '@gatehouse/contracts';
import { fc, fixtures, settled, startHuntStack, submit, waitFor, type HuntStack } from './helpers.ts';

// A model server's answer names its own `id` and `model` and reports its own `usage`: all are its
// word, untrusted like any model output (docs/product/invariants.md#untrusted-output, ADR 0744). A
// model name holding a secret, or 10 KB long, reaches no audit event whole; a negative token
// count never lowers the run's recorded spend; a response id holding a secret, 5000 characters
// long, is kept in `model_turns.response_id` redacted and bounded.

const price = loadReleaseManifest('rel-1').model;
let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

describe('hunt: a model answer that lies about its model name and usage', () => {
  it('a canary in a 10 KB model name reaches no audit event; negative usage charges nothing and lowers no spend', async () => {
    const model = `stub-CANARY_SECRET_model7-${'m'.repeat(10_000)}`;
    const lie = { input_tokens: -1_000_000, output_tokens: -50_000, total_tokens: -1_050_000 };
    await fixtures(s, 'ANS-lies', [fc(['lookup_order', { orderId: 'O-1001' }]), { type: 'message', text: 'Done.', model, usage: lie }]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'ANS-lies', 'What is the status of order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect(end.state).toBe('completed');

    const db = s.db.db;
    const turns = await db
      .selectFrom('model_turns')
      .select(['round', 'model', 'input_tokens', 'output_tokens'])
      .where('workflow_id', '=', workflowId)
      .orderBy('round')
      .execute();
    expect(turns).toHaveLength(2);
    // The honest first round is charged as reported; the lying second one as nothing, never less.
    const first = modelSpendMicroUsd(price, turns[0]!);
    expect(first).toBeGreaterThan(0);
    expect([turns[1]!.input_tokens, turns[1]!.output_tokens]).toEqual([0, 0]);
    const b = await db
      .selectFrom('budgets')
      .select(['spend_micro_usd', 'tokens_used'])
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(Number(b.spend_micro_usd)).toBe(first);
    expect(Number(b.tokens_used)).toBe(turns[0]!.input_tokens + turns[0]!.output_tokens);
    expect(turns[1]!.model).not.toContain('CANARY');
    expect(turns[1]!.model.length).toBeLessThanOrEqual(200);

    const events = await sql<{ model: string }>`select event->'revisions'->>'model' as model from
        (select event from audit_log union all select event from audit_outbox) e
      where event->>'type' = 'model.response' and event->>'runId' = ${workflowId}`.execute(db);
    expect(events.rows).toHaveLength(2);
    for (const e of events.rows) expect(e.model.length).toBeLessThanOrEqual(200);
    const kept = await sql<{ n: string }>`
      select (select count(*) from audit_log where event::text like '%CANARY%')
           + (select count(*) from audit_outbox where event::text like '%CANARY%') as n`.execute(db);
    expect(Number(kept.rows[0]!.n)).toBe(0);
  });

  it('a canary in a 5000-character response id is redacted and bounded in model_turns and reaches no audit event', async () => {
    const id = `resp_CANARY_SECRET_respid3-${'r'.repeat(5000)}`;
    await fixtures(s, 'ANS-id', [
      { type: 'function_calls', calls: [{ name: 'lookup_order', arguments: { orderId: 'O-1001' } }], id },
      { type: 'message', text: 'Done.', id },
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'ANS-id', 'What is the status of order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect(end.state).toBe('completed');

    const db = s.db.db;
    const turns = await db
      .selectFrom('model_turns')
      .select(['response_id'])
      .where('workflow_id', '=', workflowId)
      .orderBy('round')
      .execute();
    expect(turns).toHaveLength(2);
    for (const t of turns) {
      expect(t.response_id).not.toContain('CANARY');
      expect(t.response_id.length).toBeLessThanOrEqual(200);
    }
    const kept = await sql<{ n: string }>`
      select (select count(*) from audit_log where event::text like '%CANARY%')
           + (select count(*) from audit_outbox where event::text like '%CANARY%')
           + (select count(*) from discarded_model_answers where response_id like '%CANARY%') as n`.execute(db);
    expect(Number(kept.rows[0]!.n)).toBe(0);
  });
});
