import { EPOCH_UNAVAILABLE, isUnprocessedStatus } from '@gatehouse/contracts';
import { attempt, reasonOf } from './http-call.ts';
import type { AdapterCall, AdapterResult } from './adapter.ts';

/**
 * `notify_customer` (mail service, no dedupe): at most one attempt; the recipient is derived by
 * the mail service from the order, never from arguments. A lost response or a 5xx is `unknown`;
 * a refused connection, `503 epoch_unavailable`, 408 and 429 are `retry_safe` (nothing was sent).
 */
export async function notifyCustomer(call: AdapterCall): Promise<AdapterResult> {
  const res = await attempt(
    `${call.stagingUrl}/mail/messages`,
    {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${await call.token({ orderId: call.args.orderId ?? null, template: call.args.template ?? null })}`,
      },
      body: JSON.stringify({ orderId: call.args.orderId, template: call.args.template }),
    },
    Math.max(1, Math.min(call.deadlineMs - Date.now(), 5000)),
  );
  // Refused: nothing was sent, so nothing can have been delivered (docs/decisions/0141-refused-connection-is-safe-to-repeat.md).
  if (res.kind === 'no_response' && res.error === 'ECONNREFUSED')
    return { status: 'retry_safe', reason: 'connection_refused', attempts: 1 };
  if (res.kind === 'no_response') return { status: 'unknown', reason: `no_response:${res.error}`, attempts: 1 };
  if (res.status === 201)
    return {
      status: 'succeeded',
      data: { messageId: res.body.messageId, template: res.body.template },
      evidenceRef: String(res.body.messageId ?? ''),
      attempts: 1,
    };
  if (res.status === 503 && reasonOf(res.body) === EPOCH_UNAVAILABLE)
    return { status: 'retry_safe', reason: `503:${EPOCH_UNAVAILABLE}`, attempts: 1 };
  // 408 and 429: the mail service says it did not act on it, so nothing was sent (the queue sends it again).
  if (isUnprocessedStatus(res.status)) return { status: 'retry_safe', reason: `${res.status}:${reasonOf(res.body)}`, attempts: 1 };
  if (res.status >= 500) return { status: 'unknown', reason: `${res.status}:${reasonOf(res.body)}`, attempts: 1 };
  return { status: 'failed', reason: `${res.status}:${reasonOf(res.body)}`, retryable: false, attempts: 1 };
}
