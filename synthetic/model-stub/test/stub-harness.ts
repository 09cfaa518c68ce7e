import type { Server } from 'node:http';
import OpenAI from 'openai';
import type { FunctionTool, Response, ResponseFunctionToolCall, ResponseInputItem } from 'openai/resources/responses/responses';
import { closeServer, createLogger, listen } from '@gatehouse/platform';
import { createModelStubApp } from '../src/index.ts';
import type { ModelStubState } from '../src/index.ts';

/** A running stub on an ephemeral port with an `openai` v7 client pointed at it. */
export type Harness = { server: Server; port: number; baseUrl: string; client: OpenAI; state: ModelStubState; close: () => Promise<void> };

/** Starts the stub on 127.0.0.1:0 (silent logger) and builds a client with `maxRetries: 2`. */
export async function startHarness(): Promise<Harness> {
  const log = createLogger('model-stub-test');
  log.level = 'silent';
  const { app, state } = createModelStubApp({ log });
  const { server, port } = await listen(app, 0);
  const baseUrl = `http://127.0.0.1:${port}`;
  const client = new OpenAI({ apiKey: 'test', baseURL: `${baseUrl}/v1`, maxRetries: 2 });
  return { server, port, baseUrl, client, state, close: () => closeServer(server) };
}

function tool(name: string, properties: Record<string, unknown>): FunctionTool {
  return {
    type: 'function',
    name,
    description: `${name} (test)`,
    strict: true,
    parameters: { type: 'object', properties, required: Object.keys(properties), additionalProperties: false },
  };
}

/** The support pack as strict function tools (docs/product/users-and-tools.md#support-pack). */
export const SUPPORT_TOOLS: FunctionTool[] = [
  tool('lookup_order', { orderId: { type: 'string' } }),
  tool('issue_refund', { orderId: { type: 'string' }, amount: { type: 'string' }, reason: { type: 'string' } }),
  tool('reship_order', { orderId: { type: 'string' } }),
  tool('notify_customer', {
    orderId: { type: 'string' },
    template: { type: 'string', enum: ['refund_issued', 'reship_created', 'apology'] },
  }),
];

/** The change pack as strict function tools (docs/product/users-and-tools.md#change-pack). */
export const CHANGE_TOOLS: FunctionTool[] = [
  tool('lookup_change', { changeId: { type: 'string' } }),
  tool('prepare_change', { changeId: { type: 'string' }, window: { type: 'string' }, note: { type: ['string', 'null'] } }),
  tool('schedule_change', { planId: { type: 'string' }, window: { type: 'string' }, note: { type: ['string', 'null'] } }),
];

/** Result of {@link drive}: every call the model made, in order, and its final text. */
export type DriveResult = { calls: ResponseFunctionToolCall[]; responses: Response[]; finalText: string };

/**
 * Drives a stateless conversation like an agent loop: sends the whole history each turn, echoes
 * each function_call back and answers it with `outputFor(call)`, until a message-only response.
 */
export async function drive(
  client: OpenAI,
  opts: { ticketId: string; text: string; tools: FunctionTool[]; outputFor?: (c: ResponseFunctionToolCall) => string; maxTurns?: number },
): Promise<DriveResult> {
  const input: ResponseInputItem[] = [{ role: 'user', content: opts.text }];
  const calls: ResponseFunctionToolCall[] = [];
  const responses: Response[] = [];
  for (let turn = 0; turn < (opts.maxTurns ?? 12); turn++) {
    const r = await client.responses.create({
      model: 'stub-model',
      instructions: 'You are a support agent.',
      input,
      tools: opts.tools,
      store: false,
      metadata: { workflow_id: `wf-${opts.ticketId}`, ticket_id: opts.ticketId, release: 'rel-1' },
    });
    responses.push(r);
    const turnCalls = r.output.filter((o): o is ResponseFunctionToolCall => o.type === 'function_call');
    if (turnCalls.length === 0) return { calls, responses, finalText: r.output_text };
    for (const c of turnCalls) {
      calls.push(c);
      input.push({ type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments });
      input.push({ type: 'function_call_output', call_id: c.call_id, output: opts.outputFor?.(c) ?? JSON.stringify({ ok: true }) });
    }
  }
  throw new Error('conversation did not end');
}
