import { fetchCapped } from '@gatehouse/contracts';
import { boundReason } from '@gatehouse/tools';
/** Outcome of one HTTP attempt against a downstream. */
export type AttemptOutcome =
  | { kind: 'response'; status: number; body: Record<string, unknown>; headers: Headers }
  /** No answer: connection reset, socket hang-up or timeout. The write may have happened. */
  | { kind: 'no_response'; error: string };

/**
 * One HTTP attempt with a deadline (`timeoutMs`). Never throws: a lost response is
 * `no_response`, because for a write it means "outcome unknown", not "failed". So is a body
 * larger than the downstream cap (`BodyTooLarge`, 1 MiB by default): reading stops at the cap
 * and what the system of record said is unknown.
 */
export async function attempt(url: string, init: RequestInit, timeoutMs: number): Promise<AttemptOutcome> {
  try {
    const res = await fetchCapped(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    let body: Record<string, unknown> = {};
    try {
      const parsed: unknown = text ? JSON.parse(text) : {};
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
    } catch {
      body = { raw: text.slice(0, 500) };
    }
    return { kind: 'response', status: res.status, body, headers: res.headers };
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code;
    return { kind: 'no_response', error: cause ?? (err as Error).name };
  }
}

/**
 * Reason code from a staging error body `{error: {reason}}`, or `unknown` when it gives none. The
 * body is a downstream's untrusted text: the reason is redacted and bounded
 * (`boundReason`, at most 120 characters and the truncation marker) before the operation's
 * error, the audit event or a log line keeps it (docs/decisions/0710-a-downstream-reason-is-untrusted-text.md).
 */
export function reasonOf(body: Record<string, unknown>): string {
  const e = body.error as { reason?: unknown } | undefined;
  return typeof e?.reason === 'string' ? boundReason(e.reason) : 'unknown';
}
