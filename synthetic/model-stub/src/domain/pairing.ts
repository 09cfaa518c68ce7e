import type { HistoryItem } from './input-items.ts';

/** A broken call_id pairing, with the exact message the real API returns (param `input`). */
export type PairingViolation = {
  reason: 'missing_output' | 'unknown_call';
  callId: string;
  message: string;
};

/**
 * Checks the Responses API pairing rule over a stateless history: every `function_call` must be
 * answered later by a `function_call_output` with the same `call_id`, and every output must
 * answer an earlier call. Returns the first violation in input order (an orphan output is found
 * while scanning; unanswered calls after the scan), or null. Pure.
 * Sources: the OpenAI function-calling guide (each call answered by its `call_id`), and the
 * issues openai/openai-agents-python#673 and continuedev/continue#10092.
 */
export function checkPairing(items: readonly HistoryItem[]): PairingViolation | null {
  const unanswered = new Map<string, number>();
  const seen = new Set<string>();
  for (const item of items) {
    if (item.kind === 'function_call') {
      seen.add(item.callId);
      unanswered.set(item.callId, item.index);
    } else if (item.kind === 'function_call_output') {
      if (!seen.has(item.callId)) {
        return {
          reason: 'unknown_call',
          callId: item.callId,
          message: `No tool call found for function call output with call_id ${item.callId}.`,
        };
      }
      unanswered.delete(item.callId);
    }
  }
  for (const callId of unanswered.keys()) {
    return { reason: 'missing_output', callId, message: `No tool output found for function call ${callId}.` };
  }
  return null;
}
