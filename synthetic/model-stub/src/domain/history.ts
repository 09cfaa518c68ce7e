import type { HistoryItem } from './input-items.ts';

/**
 * A `function_call` found in the request history, joined with its `function_call_output`
 * (null when unanswered). `args` is the parsed `arguments` JSON object, or null when malformed.
 */
export type HistoryCall = {
  index: number;
  callId: string;
  name: string;
  args: Record<string, unknown> | null;
  output: string | null;
};

/** Parses a JSON object; returns null for malformed JSON or a non-object value. Never throws. */
export function parseJsonObject(text: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Collects the function calls of a history in input order, each with its output. Pure. */
export function collectCalls(items: readonly HistoryItem[]): HistoryCall[] {
  const calls: HistoryCall[] = [];
  for (const item of items) {
    if (item.kind === 'function_call') {
      calls.push({ index: item.index, callId: item.callId, name: item.name, args: parseJsonObject(item.arguments), output: null });
    } else if (item.kind === 'function_call_output') {
      const call = calls.find((c) => c.callId === item.callId && c.output === null);
      if (call) call.output = item.output;
    }
  }
  return calls;
}

/** The argument `key` of a call as an upper-cased id string, or null. */
export function argId(call: HistoryCall, key: string): string | null {
  const v = call.args?.[key];
  return typeof v === 'string' || typeof v === 'number' ? String(v).toUpperCase() : null;
}

/** True when the runtime answered the call as superseded (voided by a follow-up, never run). */
function superseded(call: HistoryCall): boolean {
  return parseJsonObject(call.output ?? '')?.reason === 'superseded';
}

/**
 * True when a call named `name` whose argument `key` equals `id` (case-insensitive) appears in
 * the history after input index `since`, whatever its output — except a call answered
 * `superseded`, which a model proposes again if the request still stands.
 */
export function calledSince(calls: readonly HistoryCall[], name: string, key: string, id: string, since: number): boolean {
  const want = id.toUpperCase();
  return calls.some((c) => c.index > since && c.name === name && argId(c, key) === want && !superseded(c));
}

const PLAN_ID_RE = /plan_[a-z0-9]{16}/;

/**
 * The plan id of the latest answered `prepare_change` for `changeId`: its output's JSON field
 * `planId`, else any `plan_` + 16 lowercase alphanumerics in the output text (docs/product/users-and-tools.md#change-pack).
 */
export function latestPlanId(calls: readonly HistoryCall[], changeId: string): string | null {
  for (const c of [...calls].reverse()) {
    if (c.name !== 'prepare_change' || argId(c, 'changeId') !== changeId.toUpperCase() || c.output === null) continue;
    const field = parseJsonObject(c.output)?.planId;
    if (typeof field === 'string' && field !== '') return field;
    const m = PLAN_ID_RE.exec(c.output);
    if (m) return m[0];
  }
  return null;
}
