import type { ApiErrorBody } from './api-error.ts';
import { apiError } from './api-error.ts';

/**
 * One item of a Responses API `input`, reduced to what the stub reads. `index` is the item's
 * position in the received `input` array (a string input is one user message at index 0).
 * Source: `ResponseInputItem` in openai-node `src/resources/responses/responses.ts`.
 */
export type HistoryItem =
  | { kind: 'message'; index: number; role: string; text: string }
  | { kind: 'function_call'; index: number; callId: string; name: string; arguments: string }
  | { kind: 'function_call_output'; index: number; callId: string; output: string }
  | { kind: 'other'; index: number; type: string };

/** Result of {@link normalizeInput}: the items, or the API error a real server would return. */
export type NormalizeResult = { ok: true; items: HistoryItem[] } | { ok: false; error: ApiErrorBody };

const MESSAGE_ROLES = new Set(['user', 'assistant', 'system', 'developer']);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Joins the text of string content or of `input_text` / `output_text` / `text` parts. */
function partsText(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts: string[] = [];
  for (const part of content) {
    if (!isRecord(part)) return null;
    if (typeof part.text === 'string') texts.push(part.text);
    else if (typeof part.refusal === 'string') texts.push(part.refusal);
  }
  return texts.join('\n');
}

function missing(path: string): NormalizeResult {
  return {
    ok: false,
    error: apiError(`Missing required parameter: '${path}'.`, { param: path, code: 'missing_required_parameter' }),
  };
}

function invalid(path: string, what: string): NormalizeResult {
  return {
    ok: false,
    error: apiError(`Invalid value for '${path}': ${what}.`, { param: path, code: 'invalid_value' }),
  };
}

/**
 * Validates and normalizes the `input` of a request: a string becomes one user message; array
 * items are checked the way the real API checks them (`call_id`, `name`, `arguments` on a
 * `function_call`; `call_id` and `output` on a `function_call_output`; `role` and `content` on
 * a message). Unknown item types (e.g. `item_reference`, `reasoning`) are kept as `other`.
 * Never throws.
 */
export function normalizeInput(input: string | readonly unknown[]): NormalizeResult {
  if (typeof input === 'string') return { ok: true, items: [{ kind: 'message', index: 0, role: 'user', text: input }] };
  const items: HistoryItem[] = [];
  for (const [index, raw] of input.entries()) {
    const at = `input[${index}]`;
    if (!isRecord(raw)) return invalid(at, 'expected an object');
    const type = raw.type === undefined ? 'message' : raw.type;
    if (typeof type !== 'string') return invalid(`${at}.type`, 'expected a string');
    if (type === 'message') {
      if (typeof raw.role !== 'string') return missing(`${at}.role`);
      if (!MESSAGE_ROLES.has(raw.role)) return invalid(`${at}.role`, `unsupported role '${raw.role}'`);
      if (raw.content === undefined) return missing(`${at}.content`);
      const text = partsText(raw.content);
      if (text === null) return invalid(`${at}.content`, 'expected a string or an array of content parts');
      items.push({ kind: 'message', index, role: raw.role, text });
    } else if (type === 'function_call') {
      for (const key of ['call_id', 'name', 'arguments'] as const) {
        if (raw[key] === undefined) return missing(`${at}.${key}`);
        if (typeof raw[key] !== 'string') return invalid(`${at}.${key}`, 'expected a string');
      }
      items.push({
        kind: 'function_call',
        index,
        callId: raw.call_id as string,
        name: raw.name as string,
        arguments: raw.arguments as string,
      });
    } else if (type === 'function_call_output') {
      if (raw.call_id === undefined) return missing(`${at}.call_id`);
      if (typeof raw.call_id !== 'string') return invalid(`${at}.call_id`, 'expected a string');
      if (raw.output === undefined) return missing(`${at}.output`);
      const output = partsText(raw.output);
      if (output === null) return invalid(`${at}.output`, 'expected a string or an array of content parts');
      items.push({ kind: 'function_call_output', index, callId: raw.call_id, output });
    } else {
      items.push({ kind: 'other', index, type });
    }
  }
  return { ok: true, items };
}
