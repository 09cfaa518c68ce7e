import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { ResponseFunctionToolCall, ResponseInputItem, ResponseReasoningItem } from 'openai/resources/responses/responses';
import { SUPPORT_TOOLS, startHarness, type Harness } from './stub-harness.ts';

// Reasoning items with `store: false` (docs/decisions/0145-reasoning-items-in-the-transcript.md):
// the stub, like a reasoning model, emits a reasoning item before its function calls, with an
// opaque `encrypted_content` when asked; it refuses an unstored item sent back without it, and
// records whether the previous turn's item came back right before its call.

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h.close();
});
beforeEach(() => {
  h.state.fixtures.clear();
  h.state.requests.clear();
});

type Log = {
  requests: Array<{ include: string[]; reasoning: { received: unknown[]; missing: unknown[]; misplaced: unknown[]; emitted: unknown } }>;
  reasoningErrors: number;
};
const logOf = async (ticketId: string): Promise<Log> => (await (await fetch(`${h.baseUrl}/requests?ticketId=${ticketId}`)).json()) as Log;

const USER: ResponseInputItem = { role: 'user', content: 'Where is order O-1001?' };

async function firstTurn(ticketId: string, include = true) {
  const r = await h.client.responses.create({
    model: 'stub-model',
    input: [USER],
    tools: SUPPORT_TOOLS,
    store: false,
    ...(include ? { include: ['reasoning.encrypted_content' as const] } : {}),
    metadata: { ticket_id: ticketId },
  });
  const reasoning = r.output[0] as ResponseReasoningItem;
  const call = r.output[1] as ResponseFunctionToolCall;
  return { r, reasoning, call };
}

const asInput = (x: ResponseReasoningItem): ResponseInputItem => ({
  type: 'reasoning',
  id: x.id,
  summary: x.summary,
  encrypted_content: x.encrypted_content ?? null,
});
const callInput = (c: ResponseFunctionToolCall): ResponseInputItem => ({
  type: 'function_call',
  call_id: c.call_id,
  name: c.name,
  arguments: c.arguments,
});
const outputInput = (c: ResponseFunctionToolCall): ResponseInputItem => ({
  type: 'function_call_output',
  call_id: c.call_id,
  output: '{}',
});

function next(ticketId: string, input: ResponseInputItem[]) {
  return h.client.responses.create({
    model: 'stub-model',
    input,
    tools: SUPPORT_TOOLS,
    store: false,
    include: ['reasoning.encrypted_content'],
    metadata: { ticket_id: ticketId },
  });
}

describe('reasoning items through the real openai client', () => {
  it('a reasoning item with opaque encrypted content precedes the function call; sent back in place, it is recorded', async () => {
    const { r, reasoning, call } = await firstTurn('R-1');
    expect(r.output.map((o) => o.type)).toEqual(['reasoning', 'function_call']);
    expect(reasoning.id).toMatch(/^rs_[0-9a-f]+$/);
    expect(reasoning.encrypted_content).toMatch(/^gAAAA/);
    // Opaque: neither the item id nor the call id reads in the content.
    expect(reasoning.encrypted_content).not.toContain(reasoning.id.slice(3, 15));
    expect(reasoning.encrypted_content).not.toContain(call.call_id);

    await next('R-1', [USER, asInput(reasoning), callInput(call), outputInput(call)]);
    const log = await logOf('R-1');
    expect(log.requests[0]!.include).toEqual(['reasoning.encrypted_content']);
    expect(log.requests[0]!.reasoning.emitted).toEqual({ id: reasoning.id, precedes: [call.call_id] });
    expect(log.requests[1]!.reasoning).toMatchObject({
      received: [{ id: reasoning.id, index: 1, precedes: [call.call_id] }],
      missing: [],
      misplaced: [],
    });
    expect(log.reasoningErrors).toBe(0);
  });

  it('a reasoning item left out, or placed after its call, is recorded as a reasoning error', async () => {
    const a = await firstTurn('R-2');
    await next('R-2', [USER, callInput(a.call), outputInput(a.call)]);
    const left = await logOf('R-2');
    expect(left.requests[1]!.reasoning.missing).toEqual([{ callId: a.call.call_id, reasoningId: a.reasoning.id }]);
    expect(left.reasoningErrors).toBe(1);

    const b = await firstTurn('R-3');
    await next('R-3', [USER, callInput(b.call), asInput(b.reasoning), outputInput(b.call)]);
    const misplaced = await logOf('R-3');
    expect(misplaced.requests[1]!.reasoning.misplaced).toEqual([{ reasoningId: b.reasoning.id, index: 2, callId: b.call.call_id }]);
    expect(misplaced.reasoningErrors).toBe(1);
  });

  it('store: false — an item without encrypted content, or with content that does not open, is a 400', async () => {
    const { reasoning, call } = await firstTurn('R-4', false);
    expect(reasoning.type).toBe('reasoning');
    expect(reasoning.encrypted_content).toBeNull();
    const unstored = next('R-4', [USER, asInput(reasoning), callInput(call), outputInput(call)]);
    await expect(unstored).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(unstored).rejects.toThrow(/Items are not persisted when `store` is set to false/);

    const ok = await firstTurn('R-5');
    const tampered = { ...ok.reasoning, encrypted_content: `${ok.reasoning.encrypted_content!.slice(0, -6)}AAAAAA` };
    await expect(next('R-5', [USER, asInput(tampered), callInput(ok.call), outputInput(ok.call)])).rejects.toThrow(/could not be verified/);
  });
});
