import { randomBytes } from 'node:crypto';
import type { ReasoningOutputItem } from './reasoning.ts';

/**
 * Assistant message output item; a content part is `output_text` or `refusal`.
 * Source: `ResponseOutputMessage` in openai-node `src/resources/responses/responses.ts`.
 */
export type MessageOutputItem = {
  type: 'message';
  id: string;
  role: 'assistant';
  status: 'completed';
  content: Array<{ type: 'output_text'; text: string; annotations: [] } | { type: 'refusal'; refusal: string }>;
};

/**
 * Responses API function_call output item. `arguments` is a JSON-encoded string (sent verbatim,
 * even when malformed); `id` (`fc_…`) and `call_id` (`call_…`, the pairing key) differ.
 * Source: `ResponseFunctionToolCall` in openai-node `src/resources/responses/responses.ts`.
 */
export type FunctionCallOutputItem = {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: 'completed';
};

/** An item of `Response.output`. */
export type OutputItem = MessageOutputItem | FunctionCallOutputItem | ReasoningOutputItem;

/** Token usage; counts are deterministic estimates (characters / 4, rounded up). */
export type Usage = {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
};

/**
 * The response object (`Response` in openai-node `src/resources/responses/responses.ts`,
 * OpenAI API reference, "The response object"): every non-optional field plus `status` and `usage`.
 * `created_at` is Unix seconds.
 */
export type ResponseObject = {
  id: string;
  object: 'response';
  created_at: number;
  status: 'completed';
  model: string;
  output: OutputItem[];
  error: null;
  incomplete_details: null;
  instructions: string | null;
  metadata: Record<string, string>;
  parallel_tool_calls: boolean;
  temperature: number;
  top_p: number;
  tool_choice: unknown;
  tools: unknown[];
  usage: Usage;
  previous_response_id: null;
  max_output_tokens: number | null;
  store: boolean;
  text: { format: { type: 'text' } };
  truncation: 'disabled';
  reasoning: { effort: null; summary: null };
  user: null;
};

/** The request fields a response echoes back (as validated by the responses router). */
export type ResponseEcho = {
  model: string;
  input: unknown;
  instructions?: string | null | undefined;
  metadata?: Record<string, string> | null | undefined;
  parallel_tool_calls?: boolean | null | undefined;
  tool_choice?: unknown;
  tools?: readonly unknown[] | undefined;
  store?: boolean | null | undefined;
  max_output_tokens?: number | null | undefined;
};

/** A random id `<prefix>_<hex>`: `resp_`, `msg_`, `fc_` (48 hex), `call_`, `req_` (24 hex). */
export function newId(prefix: 'resp' | 'msg' | 'fc' | 'call' | 'req'): string {
  const bytes = prefix === 'call' || prefix === 'req' ? 12 : 24;
  return `${prefix}_${randomBytes(bytes).toString('hex')}`;
}

/** An assistant message item with one `output_text` part. */
export function messageItem(text: string): MessageOutputItem {
  return {
    type: 'message',
    id: newId('msg'),
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text, annotations: [] }],
  };
}

/** An assistant message item whose only content part is `{type:"refusal", refusal}`. */
export function refusalItem(refusal: string): MessageOutputItem {
  return { type: 'message', id: newId('msg'), role: 'assistant', status: 'completed', content: [{ type: 'refusal', refusal }] };
}

/** A function_call item with a fresh `fc_` id and `callId` as its pairing id (default: a fresh `call_` id). */
export function functionCallItem(name: string, args: string, callId: string = newId('call')): FunctionCallOutputItem {
  return { type: 'function_call', id: newId('fc'), call_id: callId, name, arguments: args, status: 'completed' };
}

/** Deterministic rough token count: ceil(characters / 4). */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/** Echoes tools as the API does: function tools get `description`/`parameters` null and `strict` true by default. */
function echoTools(tools: readonly unknown[] | undefined): unknown[] {
  return (tools ?? []).map((t) => {
    const o = t as Record<string, unknown>;
    if (o.type !== 'function') return t;
    return { ...o, description: o.description ?? null, parameters: o.parameters ?? null, strict: o.strict ?? true };
  });
}

/** Builds a completed response object around `output` for the given request. */
export function buildResponse(req: ResponseEcho, output: OutputItem[], nowMs: number = Date.now()): ResponseObject {
  const inputTokens = estimateTokens(JSON.stringify([req.instructions ?? '', req.input, req.tools ?? []]));
  const outputTokens = estimateTokens(
    JSON.stringify(output.map((o) => (o.type === 'message' ? o.content : o.type === 'reasoning' ? [] : [o.name, o.arguments]))),
  );
  return {
    id: newId('resp'),
    object: 'response',
    created_at: Math.floor(nowMs / 1000),
    status: 'completed',
    model: req.model,
    output,
    error: null,
    incomplete_details: null,
    instructions: req.instructions ?? null,
    metadata: req.metadata ?? {},
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    temperature: 1,
    top_p: 1,
    tool_choice: req.tool_choice ?? 'auto',
    tools: echoTools(req.tools),
    usage: {
      input_tokens: inputTokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: inputTokens + outputTokens,
    },
    previous_response_id: null,
    max_output_tokens: req.max_output_tokens ?? null,
    store: req.store ?? true,
    text: { format: { type: 'text' } },
    truncation: 'disabled',
    reasoning: { effort: null, summary: null },
    user: null,
  };
}
