import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { apiError, type ApiErrorBody } from './api-error.ts';
import { newId } from './response-factory.ts';

/**
 * A reasoning output item as the Responses API returns it (`ResponseReasoningItem` in openai-node
 * `src/resources/responses/responses.ts`): `encrypted_content` is opaque, present when the
 * request asked `include: ['reasoning.encrypted_content']`, else null.
 */
export type ReasoningOutputItem = {
  type: 'reasoning';
  id: string;
  summary: Array<{ type: 'summary_text'; text: string }>;
  encrypted_content: string | null;
  status: 'completed';
};

/** What the stub learnt about the reasoning items of one request (`RequestRecord.reasoning`). */
export type ReasoningReport = {
  /** Reasoning items received, with their index in `input` and the call ids they preceded when issued. */
  received: Array<{ id: string; index: number; precedes: string[] }>;
  /** Calls in `input` the stub issued after a reasoning item that `input` does not carry. */
  missing: Array<{ callId: string; reasoningId: string }>;
  /** Reasoning items received somewhere other than right before their first call (only reasoning items may sit between). */
  misplaced: Array<{ reasoningId: string; index: number; callId: string }>;
  /** The reasoning item the stub emitted in its answer to this request (null: none). */
  emitted: { id: string; precedes: string[] } | null;
};

// A fixed stub key: the content is opaque to clients, and survives a restart of the stub.
const KEY = createHash('sha256').update('gatehouse-model-stub-reasoning-v1').digest();

function seal(payload: { id: string; precedes: string[] }): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', KEY, iv);
  const body = Buffer.concat([cipher.update(JSON.stringify(payload), 'utf8'), cipher.final()]);
  return `gAAAA${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
}

function open(content: string): { id: string; precedes: string[] } | null {
  try {
    if (!content.startsWith('gAAAA')) return null;
    const raw = Buffer.from(content.slice(5), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', KEY, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    const text = Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
    const v = JSON.parse(text) as { id?: unknown; precedes?: unknown };
    if (typeof v.id !== 'string' || !Array.isArray(v.precedes)) return null;
    return { id: v.id, precedes: v.precedes.map(String) };
  } catch {
    return null;
  }
}

/**
 * The reasoning items the stub issued, by the call id they preceded (bounded, oldest dropped), so
 * a later request that leaves one out is noticed (`ReasoningReport.missing`).
 */
export class ReasoningIssued {
  private readonly byCall = new Map<string, string>();
  private readonly max: number;

  constructor(max = 20_000) {
    this.max = max;
  }

  /**
   * A reasoning item preceding `callIds`; `encrypted` when the request asked for
   * `reasoning.encrypted_content` (the item then carries the sealed id and call ids).
   */
  issue(callIds: string[], encrypted: boolean): ReasoningOutputItem {
    const id = `rs_${newId('fc').slice(3)}`;
    for (const c of callIds) this.byCall.set(c, id);
    while (this.byCall.size > this.max) this.byCall.delete(this.byCall.keys().next().value!);
    return {
      type: 'reasoning',
      id,
      summary: [],
      encrypted_content: encrypted ? seal({ id, precedes: callIds }) : null,
      status: 'completed',
    };
  }

  /** The reasoning item id issued before `callId`, if any. */
  before(callId: string): string | undefined {
    return this.byCall.get(callId);
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Checks the reasoning items of a request's `input` the way a stateless (`store: false`) request
 * is checked by the Responses API: a reasoning item must carry an `id` and, without stored items,
 * its `encrypted_content` (else 400 — the API cannot find an unstored item); content that does not
 * open, or names another id, is a 400. Then reports, without refusing, issued reasoning items left
 * out and reasoning items not placed right before the first call they preceded.
 */
export function checkReasoning(
  input: string | readonly unknown[],
  opts: { store: boolean; issued: ReasoningIssued },
): { ok: true; report: ReasoningReport } | { ok: false; error: ApiErrorBody } {
  const report: ReasoningReport = { received: [], missing: [], misplaced: [], emitted: null };
  if (typeof input === 'string') return { ok: true, report };
  const callIndex = new Map<string, number>();
  input.forEach((raw, index) => {
    if (isRecord(raw) && raw.type === 'function_call' && typeof raw.call_id === 'string') callIndex.set(raw.call_id, index);
  });
  for (const [index, raw] of input.entries()) {
    if (!isRecord(raw) || raw.type !== 'reasoning') continue;
    const at = `input[${index}]`;
    if (typeof raw.id !== 'string' || !raw.id)
      return {
        ok: false,
        error: apiError(`Missing required parameter: '${at}.id'.`, { param: `${at}.id`, code: 'missing_required_parameter' }),
      };
    if (typeof raw.encrypted_content !== 'string' || !raw.encrypted_content) {
      if (!opts.store)
        return {
          ok: false,
          error: apiError(
            `Item with id '${raw.id}' not found. Items are not persisted when \`store\` is set to false. Try again with \`store\` set to true, or remove this item from your input.`,
            { param: 'input' },
          ),
        };
      report.received.push({ id: raw.id, index, precedes: [] });
      continue;
    }
    const sealed = open(raw.encrypted_content);
    if (!sealed || sealed.id !== raw.id)
      return {
        ok: false,
        error: apiError(`The encrypted content for item ${raw.id} could not be verified.`, {
          param: `${at}.encrypted_content`,
          code: 'invalid_encrypted_content',
        }),
      };
    report.received.push({ id: raw.id, index, precedes: sealed.precedes });
    const first = sealed.precedes.map((c) => callIndex.get(c)).find((i) => i !== undefined);
    if (first === undefined) continue;
    const between = input.slice(index + 1, first);
    if (first < index || !between.every((b) => isRecord(b) && b.type === 'reasoning'))
      report.misplaced.push({ reasoningId: raw.id, index, callId: sealed.precedes[0]! });
  }
  const receivedIds = new Set(report.received.map((r) => r.id));
  for (const callId of callIndex.keys()) {
    const reasoningId = opts.issued.before(callId);
    if (reasoningId && !receivedIds.has(reasoningId)) report.missing.push({ callId, reasoningId });
  }
  return { ok: true, report };
}
