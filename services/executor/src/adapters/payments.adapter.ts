import type { AdapterCall, AdapterResult } from './adapter.ts';
import { idempotentWrite } from './idempotent-write.ts';

/** Attempts at most for the idempotent payments write. */
export const PAYMENTS_MAX_ATTEMPTS = 4;

/**
 * `issue_refund` through the payments ledger (idempotent write). Every attempt carries the same
 * `Idempotency-Key` and fencing token, so a retry after a lost response replays the stored
 * refund instead of paying twice. 429 (Retry-After honoured within the deadline), 5xx and lost
 * responses are retried (cockatiel: capped exponential backoff, full jitter, a circuit breaker
 * per downstream and tenant); any other 4xx is final — the payments ledger refused (e.g. its own ceiling).
 * When attempts run out after an unanswered attempt, the outcome is `unknown`.
 */
export function issueRefund(call: AdapterCall): Promise<AdapterResult> {
  return idempotentWrite(call, {
    downstream: 'payments',
    url: `${call.stagingUrl}/ledger/refunds`,
    body: { orderId: call.args.orderId, amountCents: call.args.amountCents, reason: call.args.reason },
    target: { orderId: call.args.orderId ?? null, amountCents: call.args.amountCents ?? null },
    maxAttempts: PAYMENTS_MAX_ATTEMPTS,
    evidence: (b) => String(b.refundId ?? ''),
  });
}
