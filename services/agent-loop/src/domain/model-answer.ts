import type OpenAI from 'openai';
import { boundReason } from '@gatehouse/tools';

/**
 * Largest token count of one answer that is kept as reported (each of input, output; the total
 * at most twice that). No model's context comes near it; a larger count is charged as this many
 * (docs/decisions/0744-a-model-answers-usage-is-clamped-never-lowered.md), which keeps one
 * answer's spend inside the ledger's integer columns.
 */
export const MAX_ANSWER_TOKENS = 10_000_000;

/**
 * One reported token count made safe to charge: a whole number in `[0, max]`. A fraction is
 * rounded up, a negative, non-number or non-finite count is 0, a larger one is `max`: the charge
 * of an answer is never below zero, so the run's and the tenant's spend never decrease
 * (docs/decisions/0744-a-model-answers-usage-is-clamped-never-lowered.md).
 */
export function tokenCount(v: unknown, max = MAX_ANSWER_TOKENS): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v <= 0) return 0;
  return Math.min(max, Math.ceil(v));
}

/** Whether the model server's answer needed {@link trustedAnswer} to change its `id`, `model` or `usage`. */
export type AnswerCorrections = { id: boolean; model: boolean; usage: boolean };

/**
 * The fields of a model server's answer that Gatehouse records, made safe to record
 * (docs/product/invariants.md#untrusted-output): the answer's `model` name is untrusted text that
 * goes into `model_turns`, `discarded_model_answers` and the `model.response` audit event, and its
 * `id` (the Responses API response id) goes into the `response_id` of both tables, so each is
 * redacted and bounded like a downstream reason (`boundReason`: 120 characters, marker where cut;
 * a non-string is the empty string); its `usage` counts are clamped ({@link tokenCount}), the
 * total never below input plus output.
 * Returns a copy of `response` with those fields replaced, and which of them changed. Never throws.
 */
export function trustedAnswer(response: OpenAI.Responses.Response): {
  response: OpenAI.Responses.Response;
  corrected: AnswerCorrections;
} {
  const id = boundReason(typeof response.id === 'string' ? response.id : '');
  const model = boundReason(typeof response.model === 'string' ? response.model : '');
  const u = response.usage;
  const usage = u === undefined || u === null ? u : clampUsage(u);
  const usageChanged =
    !!u &&
    !!usage &&
    (u.input_tokens !== usage.input_tokens || u.output_tokens !== usage.output_tokens || u.total_tokens !== usage.total_tokens);
  return {
    response: { ...response, id, model, usage },
    corrected: { id: id !== response.id, model: model !== response.model, usage: usageChanged },
  };
}

/** `usage` with its three counts clamped by {@link tokenCount}; the total is at least input plus output. */
function clampUsage(u: OpenAI.Responses.ResponseUsage): OpenAI.Responses.ResponseUsage {
  const input_tokens = tokenCount(u.input_tokens);
  const output_tokens = tokenCount(u.output_tokens);
  const total_tokens = Math.max(input_tokens + output_tokens, tokenCount(u.total_tokens, 2 * MAX_ANSWER_TOKENS));
  return { ...u, input_tokens, output_tokens, total_tokens };
}
