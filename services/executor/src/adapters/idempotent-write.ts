import { BrokenCircuitError } from 'cockatiel';
import { attempt, reasonOf } from './http-call.ts';
import type { BindingTarget } from '@gatehouse/credentials';
import { isOutageStatus } from '@gatehouse/contracts';
import { AUDIT_HELD_BEFORE_RETRY, HELD_BEFORE_RETRY, HELD_CHECK_UNREADABLE, type AdapterCall, type AdapterResult } from './adapter.ts';
import { idempotentWritePolicy, RetryableDownstreamError } from './resilience.ts';

/** The connection error code of a port nobody listens on: the request was never sent. */
const CONNECTION_REFUSED = 'ECONNREFUSED';

/** An HTTP-date in the preferred format (IMF-fixdate, RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = /[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT/g;

/**
 * The wait a 429 or a 503 asks for, ms: `retry-after-ms`, else `Retry-After` as seconds or as an
 * HTTP-date (RFC 9110 §10.2.3), never negative; undefined when neither is given or readable (the
 * policy's own backoff then applies). A field sent twice reaches us joined with ", " (RFC 9110
 * §5.3): repeated seconds, or repeated IMF-fixdates, are read as the longest wait they name.
 */
export function retryAfterMs(headers: Headers, nowMs = Date.now()): number | undefined {
  const ms = headers.get('retry-after-ms')?.trim();
  if (ms && Number.isFinite(Number(ms))) return Math.max(0, Number(ms));
  const value = headers.get('retry-after')?.trim();
  if (!value) return undefined;
  if (/^\d+(\s*,\s*\d+)*$/.test(value)) return Math.max(...value.split(',').map(Number)) * 1000;
  const dates = value.match(IMF_FIXDATE);
  if (dates && dates.join(', ') === value) return Math.max(0, ...dates.map((d) => Date.parse(d) - nowMs));
  const at = /[a-z]/i.test(value) ? Date.parse(value) : Number.NaN; // an HTTP-date names its day
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/**
 * The wait a downstream asked for ({@link retryAfterMs}, ms, undefined when none) and whether it
 * ends at or past `deadlineMs` (epoch ms): such a retry is not waited for, so the worker is not
 * held for a send that cannot be made.
 */
function askedWait(headers: Headers, deadlineMs: number): { retryAfterMs: number | undefined; pastDeadline: boolean } {
  const ms = retryAfterMs(headers);
  return { retryAfterMs: ms, pastDeadline: ms !== undefined && Date.now() + ms >= deadlineMs };
}

/**
 * The error of the `nth` 429 of one write: retried after its Retry-After — once (ADR 0753): a
 * second 429 is not retried — and never when the wait would end past `deadlineMs` (epoch ms:
 * `rate_limited_past_deadline`, the worker is not held for a retry that cannot be made). Either
 * way it counts as a failure towards the breaker of the tenant's calls to that downstream.
 */
function rateLimitedError(headers: Headers, deadlineMs: number, nth: number): RetryableDownstreamError {
  const wait = askedWait(headers, deadlineMs);
  return new RetryableDownstreamError(wait.pastDeadline ? 'rate_limited_past_deadline' : 'rate_limited', {
    ...wait,
    rateLimitedAgain: nth > 1,
  });
}

/**
 * The error of a 408 or a 5xx (not processed, `isOutageStatus`): sent again under the same key
 * after the policy's backoff, or after the wait its `Retry-After` asks for (a 503 says how long
 * the service expects to be unavailable, RFC 9110 §15.6.4) — not retried when that wait ends past
 * `deadlineMs` (ADR 0785).
 */
function outageError(
  res: { status: number; headers: Headers; body: Record<string, unknown> },
  deadlineMs: number,
): RetryableDownstreamError {
  return new RetryableDownstreamError(`${res.status}:${reasonOf(res.body)}`, askedWait(res.headers, deadlineMs));
}

/**
 * The instant past which no retry of one write is waited for or sent, epoch ms. A retry after
 * attempts that were all answered without effect (or refused) is a new send: it keeps within the
 * earlier of the execution's deadline and the run's working-time deadline (the run's budget can
 * end first, ADR 0772). A retry after an unanswered attempt asks, under the same key, about an
 * effect that may already exist — it is how a lost answer is settled without reconciliation — so
 * it keeps the execution's deadline only.
 */
function retryDeadline(call: Pick<AdapterCall, 'deadlineMs' | 'runDeadlineMs'>, sawNoAnswer: boolean): number {
  return call.runDeadlineMs == null || sawNoAnswer ? call.deadlineMs : Math.min(call.deadlineMs, call.runDeadlineMs);
}

/**
 * Why a retry that would be a new effect is not sent, or null when it may be: the tool's
 * containment (ADR 0700), then audit health (ADR 0706). A check that cannot be read (the ledger
 * unreachable) holds the retry as well ({@link HELD_CHECK_UNREADABLE}): every attempt so far was
 * answered without effect, so the step is safe to repeat, and its next claim asks both gates anew.
 * Reported as a failure instead, a refund nothing had paid would end `failed` on a ledger blip.
 */
async function heldBeforeRetry(call: AdapterCall): Promise<string | null> {
  try {
    if (await call.heldByContainment?.()) return HELD_BEFORE_RETRY;
    if (await call.heldByAudit?.()) return AUDIT_HELD_BEFORE_RETRY;
    return null;
  } catch {
    return HELD_CHECK_UNREADABLE;
  }
}

/**
 * One idempotent write (`POST url` with `body`) under the downstream's retry policy: the same
 * `Idempotency-Key` (the operation key) and fencing token on every attempt; 200/201 succeed
 * (`evidence` picks the downstream id); a 429 gets one retry after its Retry-After (it ends at
 * once, `rate_limited_past_deadline`, when the wait would end past the deadline — the execution's
 * or the run's, whichever is earlier ({@link retryDeadline}); a second 429 ends
 * it `rate_limited` — docs/decisions/0753-a-429-gets-one-retry.md), 408, 5xx and lost
 * responses are retried up to `maxAttempts` within the deadline (a 5xx's Retry-After is waited
 * for, or ends the write when it ends past the deadline: ADR 0785); other 4xx are final. After an unanswered
 * attempt (it may have landed), running out of attempts or a final 4xx is `unknown`, never
 * `failed` (docs/product/hard-cases.md#timeout-with-unknown-outcome: an unknown write outcome is failed_unknown, never retried automatically).
 * A refused connection (`ECONNREFUSED`) sent nothing, so it is not an unanswered attempt: when
 * every attempt was refused or answered without effect and the last was refused, the result is
 * `retry_safe` (the executor holds the step and repeats it under the same key) — see
 * docs/decisions/0141-refused-connection-is-safe-to-repeat.md. A retry after attempts that were
 * all answered without effect or refused is a new send: when `call.heldByContainment` says the
 * tool was switched off meanwhile, it is not sent and the result is `retry_safe`
 * ({@link HELD_BEFORE_RETRY}; the executor pauses the run — ADR 0700); when `call.heldByAudit` says
 * audit health fails the gate, it is not sent either ({@link AUDIT_HELD_BEFORE_RETRY}; the executor
 * holds the step as its audit gate does — ADR 0706).
 */
export async function idempotentWrite(
  call: AdapterCall,
  req: {
    downstream: string;
    url: string;
    body: Record<string, unknown>;
    /** The body's target and amount, bound into each attempt's token. */
    target: BindingTarget;
    maxAttempts: number;
    evidence: (body: Record<string, unknown>) => string;
  },
): Promise<AdapterResult> {
  let attempts = 0;
  let sawNoAnswer = false;
  let lastRefused = false;
  let rateLimited = 0;
  const policy = idempotentWritePolicy(req.downstream, call.workflow.tenant, req.maxAttempts, () => retryDeadline(call, sawNoAnswer));
  try {
    return await policy.execute(async (): Promise<AdapterResult> => {
      const remaining = call.deadlineMs - Date.now();
      if (remaining <= 0 || (attempts > 0 && Date.now() >= retryDeadline(call, sawNoAnswer))) throw new Error('deadline');
      // Nothing came of the attempts so far: the next one is a new effect, held by a switch-off
      // (ADR 0700) and by audit storage that cannot be written (ADR 0706).
      if (attempts > 0 && !sawNoAnswer) {
        const held = await heldBeforeRetry(call);
        if (held) return { status: 'retry_safe', reason: held, attempts };
      }
      attempts++;
      // The operation key on every attempt; a fresh one only in the control-removed test.
      const key = call.freshKeyPerAttempt ? `${call.operationKey}:attempt:${attempts}` : call.operationKey;
      const res = await attempt(
        req.url,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${await call.token(req.target, key)}`,
            'idempotency-key': key,
            'x-fencing-token': String(call.fencingToken),
          },
          body: JSON.stringify(req.body),
        },
        Math.min(remaining, 5000),
      );
      lastRefused = res.kind === 'no_response' && res.error === CONNECTION_REFUSED;
      if (lastRefused) throw new RetryableDownstreamError(`no_response:${CONNECTION_REFUSED}`, { refused: true });
      if (res.kind === 'no_response') {
        sawNoAnswer = true;
        throw new RetryableDownstreamError(`no_response:${res.error}`, { ambiguous: true });
      }
      if (res.status === 200 || res.status === 201) {
        return { status: 'succeeded', data: res.body, evidenceRef: req.evidence(res.body), attempts };
      }
      if (res.status === 429) throw rateLimitedError(res.headers, retryDeadline(call, sawNoAnswer), ++rateLimited);
      // 408 and 5xx: not processed (`isOutageStatus`, 429 above), sent again under the same key.
      if (isOutageStatus(res.status)) throw outageError(res, retryDeadline(call, sawNoAnswer));
      // A refusal proves nothing about an earlier unanswered attempt with the same key: it may
      // have landed (a revoked credential, say, is refused before the key is looked up).
      if (sawNoAnswer) return { status: 'unknown', reason: `${res.status}:${reasonOf(res.body)} after an unanswered attempt`, attempts };
      return { status: 'failed', reason: `${res.status}:${reasonOf(res.body)}`, retryable: false, attempts };
    });
  } catch (err) {
    const reason =
      err instanceof RetryableDownstreamError ? err.reason : err instanceof BrokenCircuitError ? 'circuit_open' : (err as Error).message;
    // With one key for every attempt, an unanswered attempt may have landed: unknown, not failed.
    if (!sawNoAnswer && lastRefused) return { status: 'retry_safe', reason: 'connection_refused', attempts };
    return sawNoAnswer ? { status: 'unknown', reason, attempts } : { status: 'failed', reason, retryable: true, attempts };
  }
}
