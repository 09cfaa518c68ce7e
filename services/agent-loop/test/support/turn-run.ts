import { createHash, randomUUID } from 'node:crypto';
import type OpenAI from 'openai';
import { loadReleaseManifest } from '@gatehouse/contracts';
import type { Db } from '@gatehouse/ledger';
import { createLogger, type OutboxRelay } from '@gatehouse/platform';
import type { TurnDeps } from '../../src/jobs/turns.processor.ts';

/** The model name and price of release rel-1 (what the tests' turns are charged at). */
export const REL1_MODEL = loadReleaseManifest('rel-1').model;

/**
 * Writes a run just submitted, as intake leaves it: state `received`, round 0, a budget of 8
 * rounds, 6 tool calls, 90 s and `maxSpendMicroUsd` (default 1 000 000 µ$), and its ticket text as
 * the first user message. Returns the workflow id.
 */
export async function submittedRun(
  db: Db,
  o: { tenant?: string; mode?: 'investigate' | 'act'; release?: string; text?: string; maxSpendMicroUsd?: number } = {},
): Promise<string> {
  const id = randomUUID();
  await db
    .insertInto('workflows')
    .values({
      id,
      tenant: o.tenant ?? 'quillfeather',
      ticket_id: `T-${id.slice(0, 8)}`,
      user_id: 'rep-ana',
      pack: 'support',
      mode: o.mode ?? 'investigate',
      text_sha256: createHash('sha256').update(id).digest('hex'),
      state: 'received',
      release_id: o.release ?? 'rel-1',
      policy_revision: 'support-p1',
      catalog_digest: 'f'.repeat(64),
    })
    .execute();
  await db
    .insertInto('budgets')
    .values({
      workflow_id: id,
      max_rounds: 8,
      max_tool_calls: 6,
      deadline_at: new Date(Date.now() + 90_000),
      max_spend_micro_usd: o.maxSpendMicroUsd ?? 1_000_000,
    })
    .execute();
  await db
    .insertInto('conversation_items')
    .values({
      workflow_id: id,
      round: 0,
      kind: 'user_message',
      call_id: null,
      item: JSON.stringify({ role: 'user', content: o.text ?? 'What is the status of order O-1001?' }),
    })
    .execute();
  return id;
}

/**
 * A turn's dependencies over `db` and `model`: rel-1's model and price, no test switch, the
 * outage credit on (15 min ceiling), the tenant's daily cap `dailyMicroUsd` (default 100 $), an
 * outbox relay that publishes nothing.
 */
export function turnDeps(db: Db, model: OpenAI, o: { dailyMicroUsd?: number; logName?: string } = {}): TurnDeps {
  return {
    db,
    relay: { publish: async () => undefined } as unknown as OutboxRelay,
    log: createLogger(o.logName ?? 'agent-loop-turn-test'),
    model,
    modelName: REL1_MODEL.name,
    modelPrice: REL1_MODEL,
    hooks: { crashAfterModelResponse: false, disableToolFilter: false, dropReasoning: false, disableOutputBoundary: false },
    outagePolicy: { ceilingMs: 15 * 60_000, credit: true },
    tenantCap: { dailyMicroUsd: o.dailyMicroUsd ?? 100_000_000, disabled: false },
  };
}

/**
 * A model that answers every request with the plain message `text` (no tool call) and a small
 * usage, through the `responses.create` the turn calls; `requests()` counts what it was asked.
 */
export function messageModel(text: string): { client: OpenAI; requests: () => number } {
  let n = 0;
  const create = async () => {
    n++;
    return {
      id: `resp_${randomUUID().slice(0, 12)}`,
      model: REL1_MODEL.name,
      output_text: text,
      output: [
        {
          type: 'message',
          id: `msg_${n}`,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text, annotations: [] }],
        },
      ],
      usage: { input_tokens: 100, output_tokens: 10, total_tokens: 110 },
    };
  };
  return { client: { responses: { create } } as unknown as OpenAI, requests: () => n };
}
