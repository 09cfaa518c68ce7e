import { attempt, reasonOf } from './http-call.ts';
import type { AdapterCall, AdapterResult } from './adapter.ts';

/** Attempts at most, and backoff cap, for the idempotent payments write. */
export const PAYMENTS_MAX_ATTEMPTS = 4;
const BACKOFF_CAP_MS = 2000;

/**
 * `issue_refund` through the payments ledger (idempotent write): every attempt carries the same
 * `Idempotency-Key`, so a retry after a lost response replays the stored refund instead of
 * paying twice. Retries 429 (honouring Retry-After within the deadline), 5xx and lost
 * responses with capped exponential backoff and full jitter; any other 4xx is final.
 */
export async function issueRefund(call: AdapterCall): Promise<AdapterResult> {
  let lastReason = 'no_attempt';
  for (let n = 1; n <= PAYMENTS_MAX_ATTEMPTS; n++) {
    const remaining = call.deadlineMs - Date.now();
    if (remaining <= 0) break;
    const res = await attempt(
      `${call.stagingUrl}/ledger/refunds`,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${await call.token()}`,
          'idempotency-key': call.operationKey,
          'x-fencing-token': String(call.fencingToken),
        },
        body: JSON.stringify({ orderId: call.args.orderId, amountCents: call.args.amountCents, reason: call.args.reason }),
      },
      Math.min(remaining, 5000),
    );
    let waitMs = Math.random() * Math.min(BACKOFF_CAP_MS, 100 * 2 ** n);
    if (res.kind === 'response') {
      if (res.status === 200 || res.status === 201) {
        return { status: 'succeeded', data: res.body, evidenceRef: String(res.body.refundId ?? ''), attempts: n };
      }
      lastReason = res.status === 429 ? 'rate_limited' : `${res.status}:${reasonOf(res.body)}`;
      if (res.status === 429) {
        const ms = Number(res.headers.get('retry-after-ms') ?? Number(res.headers.get('retry-after') ?? 1) * 1000);
        waitMs = Number.isFinite(ms) ? ms : waitMs;
      } else if (res.status < 500) {
        return { status: 'failed', reason: lastReason, retryable: false, attempts: n };
      }
    } else {
      lastReason = `no_response:${res.error}`;
    }
    if (Date.now() + waitMs >= call.deadlineMs) break;
    await new Promise((r) => setTimeout(r, waitMs));
  }
  // Retries were all with one key: if any attempt landed, the next one with the key replays it.
  // Out of attempts with an unanswered attempt in between, the outcome is unknown.
  return lastReason.startsWith('no_response')
    ? { status: 'unknown', reason: lastReason, attempts: PAYMENTS_MAX_ATTEMPTS }
    : { status: 'failed', reason: lastReason, retryable: true, attempts: PAYMENTS_MAX_ATTEMPTS };
}
