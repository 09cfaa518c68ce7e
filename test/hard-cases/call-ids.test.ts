import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadReleaseManifest, modelSpendMicroUsd } from '@gatehouse/contracts';
import { fixtures, modelRequests, msg, settled, sleep, startHuntStack, submit, waitFor, type Entry, type HuntStack } from './helpers.ts';

// OpenAI-compatible servers other than OpenAI's may repeat a function call's call_id: twice in
// one answer, or `call_0` in every answer. Gatehouse keys a run's calls by call_id (ADR 0693):
// such an answer stops the run `model_error` with a next step naming the cause, none of its calls
// is recorded or dispatched, the model is asked once for the round (no job retry asks it again),
// and the answer is charged once.

const price = loadReleaseManifest('rel-1').model;
let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/** One answer whose calls look orders up under the given call_ids. */
const lookups = (...calls: Array<[string, string]>): Entry => ({
  type: 'function_calls',
  calls: calls.map(([orderId, callId]) => ({ name: 'lookup_order', arguments: { orderId }, call_id: callId })),
});

/** What the run recorded and paid: its proposals by round, its recorded turns, its spend. */
async function ledger(workflowId: string): Promise<{ proposals: number[]; turns: number; spendOk: boolean; calls: number }> {
  const db = s.db.db;
  const proposals = await db.selectFrom('proposals').select('round').where('workflow_id', '=', workflowId).orderBy('round').execute();
  const turns = await db
    .selectFrom('model_turns')
    .select(['input_tokens', 'output_tokens'])
    .where('workflow_id', '=', workflowId)
    .execute();
  const discarded = await db
    .selectFrom('discarded_model_answers')
    .select(['input_tokens', 'output_tokens'])
    .where('workflow_id', '=', workflowId)
    .execute();
  const b = await db
    .selectFrom('budgets')
    .select(['spend_micro_usd', 'tool_calls_used'])
    .where('workflow_id', '=', workflowId)
    .executeTakeFirstOrThrow();
  const paid = [...turns, ...discarded].reduce((sum, t) => sum + modelSpendMicroUsd(price, t), 0);
  return {
    proposals: proposals.map((p) => p.round),
    turns: turns.length + discarded.length,
    spendOk: Number(b.spend_micro_usd) === paid && paid > 0,
    calls: b.tool_calls_used,
  };
}

describe('hunt: a model answer whose call_ids repeat', () => {
  it('two calls of one answer share a call_id: the run stops model_error, nothing dispatched, the model asked once, the answer charged once, the call_id not logged', async () => {
    const dup = 'call_dup_5e1c';
    await fixtures(s, 'CID-same', [lookups(['O-1001', dup], ['O-1002', dup]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'CID-same', 'What is the status of orders O-1001 and O-1002?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect([end.state, end.stopReason]).toEqual(['stopped', 'model_error']);
    expect(end.nextStep).toMatch(/same call_id twice/);
    expect(end.actions).toEqual([]);
    await sleep(3000); // a retried job would ask the model again meanwhile
    expect((await modelRequests(s, 'CID-same')).requests).toHaveLength(1);
    expect(await ledger(workflowId)).toEqual({ proposals: [], turns: 1, spendOk: true, calls: 0 });
    // The warning is logged with the count of calls, never the model's call_ids.
    const log = readFileSync(resolve(s.dir, 'agent-loop.log'), 'utf8');
    expect(log).toContain('model answer repeats a call_id');
    expect(log).not.toContain(dup);
  });

  it('a later answer reuses a call_id of an earlier round: the run stops model_error, the later calls are not dispatched, the model asked once per round', async () => {
    await fixtures(s, 'CID-again', [lookups(['O-1001', 'call_0']), lookups(['O-1002', 'call_0']), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'CID-again', 'What is the status of orders O-1001 and O-1002?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect([end.state, end.stopReason]).toEqual(['stopped', 'model_error']);
    expect(end.nextStep).toMatch(/call_id an earlier answer of this run already used/);
    await sleep(3000);
    const asked = await modelRequests(s, 'CID-again');
    expect(asked.requests).toHaveLength(2);
    expect(asked.pairingErrors).toBe(0);
    // Round 1's call was recorded and answered; round 2's was neither recorded nor dispatched.
    expect(await ledger(workflowId)).toEqual({ proposals: [1], turns: 2, spendOk: true, calls: 1 });
  });

  it('a server that answers call_0 every time: stopped model_error at round 2, not re-asked until the job dead-letters', async () => {
    const again: Entry = { type: 'function_calls', calls: [{ name: 'lookup_order', arguments: { orderId: 'O-1001' }, call_id: 'call_0' }] };
    await fixtures(s, 'CID-always', [again], true);
    const { token, workflowId } = await submit(s, 'rep-ana', 'CID-always', 'What is the status of order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect([end.state, end.stopReason]).toEqual(['stopped', 'model_error']);
    expect(end.nextStep).toMatch(/check the model server/);
    await sleep(3000);
    expect((await modelRequests(s, 'CID-always')).requests).toHaveLength(2);
    expect(await ledger(workflowId)).toEqual({ proposals: [1], turns: 2, spendOk: true, calls: 1 });
  });

  it('a call_id holding a canary secret: the run stops model_error, nothing recorded under it, the secret in no audit event, view or log', async () => {
    const secret = 'call_CANARY_SECRET_cid9';
    await fixtures(s, 'CID-secret', [lookups(['O-1001', secret]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'CID-secret', 'What is the status of order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect([end.state, end.stopReason]).toEqual(['stopped', 'model_error']);
    expect(end.nextStep).toMatch(/call_id that holds a secret/);
    expect(end.nextStep).not.toContain('CANARY');
    expect(end.actions).toEqual([]);
    await sleep(3000); // a retried job would ask the model again meanwhile
    expect((await modelRequests(s, 'CID-secret')).requests).toHaveLength(1);
    expect(await ledger(workflowId)).toEqual({ proposals: [], turns: 1, spendOk: true, calls: 0 });
    const kept = await sql<{ n: string }>`
      select (select count(*) from audit_log where event::text like '%CANARY%')
           + (select count(*) from audit_outbox where event::text like '%CANARY%')
           + (select count(*) from conversation_items where workflow_id = ${workflowId} and item::text like '%CANARY%') as n`.execute(
      s.db.db,
    );
    expect(Number(kept.rows[0]!.n)).toBe(0);
    // The product's own logs (the model stub, which wrote the call_id, is no part of it).
    for (const svc of ['agent-loop', 'policy-gateway', 'executor', 'audit'])
      expect(readFileSync(resolve(s.dir, `${svc}.log`), 'utf8'), svc).not.toContain('CANARY');
  });

  it('a call_id of 3000 random characters: the run stops model_error, the model asked once and the answer charged once (it failed the round and was re-asked)', async () => {
    const long = `call_${randomBytes(1500).toString('hex')}`;
    await fixtures(s, 'CID-long', [lookups(['O-1001', long]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'CID-long', 'What is the status of order O-1001?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect([end.state, end.stopReason]).toEqual(['stopped', 'model_error']);
    expect(end.nextStep).toMatch(/call_id longer than 256 characters/);
    await sleep(3000); // a retried job would ask the model again meanwhile
    expect((await modelRequests(s, 'CID-long')).requests).toHaveLength(1);
    expect(await ledger(workflowId)).toEqual({ proposals: [], turns: 1, spendOk: true, calls: 0 });
  });
});
