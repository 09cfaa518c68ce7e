import { fetchCapped, isOutageStatus } from '@gatehouse/contracts';
import { boundReason } from '@gatehouse/tools';
/** One compensating call: idempotency key, fencing token and a freshly minted delegated token. */
export interface CompensationCall {
  stagingUrl: string;
  /** Idempotency-Key sent downstream (stable across retries of the same remediation). */
  key: string;
  /** Fencing token of the claim that sends it (staging refuses a lower one for the key). */
  fence: number;
  /** Delegated bearer token (RFC 8693 semantics: sub = the approving lead). */
  token: string;
  /** Per-request timeout, ms (default 5000). */
  timeoutMs?: number;
}

/**
 * What a compensating call produced: `succeeded` (with the downstream id as evidence), `retry`
 * (no answer, or a status the downstream did not process the request with — 408, 429, 5xx,
 * `isOutageStatus` — the call is idempotent by key, so sending it again is safe), or `failed`
 * (the downstream refused: any other 4xx). A `reason` is the status and the downstream's own
 * reason, redacted and bounded (`boundReason`, ADR 0710).
 */
export type CompensationResult =
  | { status: 'succeeded'; evidenceRef: string; data: Record<string, unknown> }
  | { status: 'retry'; reason: string }
  | { status: 'failed'; reason: string };

async function post(c: CompensationCall, path: string, body: Record<string, unknown>, evidence: string): Promise<CompensationResult> {
  let res: Response;
  try {
    res = await fetchCapped(`${c.stagingUrl}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${c.token}`,
        'idempotency-key': c.key,
        'x-fencing-token': String(c.fence),
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(c.timeoutMs ?? 5000),
    });
  } catch (err) {
    return { status: 'retry', reason: `no_response:${(err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name}` };
  }
  const parsed = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  // The downstream's reason is untrusted text: redacted and bounded before the operation, the
  // audit event or a next step keeps it (docs/decisions/0710-a-downstream-reason-is-untrusted-text.md).
  const reason = `${res.status}:${boundReason(String((parsed.error as { reason?: unknown } | undefined)?.reason ?? 'unknown'))}`;
  if (res.status === 200 || res.status === 201) return { status: 'succeeded', evidenceRef: String(parsed[evidence] ?? ''), data: parsed };
  if (isOutageStatus(res.status)) return { status: 'retry', reason };
  return { status: 'failed', reason };
}

/** `reverse_refund`: reverses the whole refund in the payments ledger (`POST /ledger/refunds/:id/reversals`). */
export function reverseRefund(c: CompensationCall, refundId: string, reason: string): Promise<CompensationResult> {
  return post(c, `/ledger/refunds/${encodeURIComponent(refundId)}/reversals`, { reason }, 'reversalId');
}

/** `cancel_shipment`: cancels one shipment of an order (`POST /orders/:id/shipments/:shipmentId/cancel`). */
export function cancelShipment(c: CompensationCall, orderId: string, shipmentId: string): Promise<CompensationResult> {
  return post(c, `/orders/${encodeURIComponent(orderId)}/shipments/${encodeURIComponent(shipmentId)}/cancel`, {}, 'shipmentId');
}

/**
 * Replays a lost refund under its original idempotency key (`POST /ledger/refunds`), so a late
 * original and the replay converge on one refund in the ledger. Amount in integer cents.
 */
export function replayRefund(
  c: CompensationCall,
  refund: { orderId: string; amountCents: number; reason: string },
): Promise<CompensationResult> {
  return post(c, '/ledger/refunds', refund, 'refundId');
}

/**
 * `cancel_change`: cancels a scheduled change before its window starts
 * (`POST /changes/operations/:operationKey/cancel`); a 409 `window_started` is a refusal (`failed`).
 */
export function cancelChange(c: CompensationCall, operationKey: string, reason: string): Promise<CompensationResult> {
  return post(c, `/changes/operations/${encodeURIComponent(operationKey)}/cancel`, { reason }, 'operationKey');
}
