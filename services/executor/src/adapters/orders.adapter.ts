import { listedShipment, wholeList, type ListedShipment } from '@gatehouse/contracts';
import { baselineReadAt, overlappingDispatches } from '@gatehouse/ledger';
import { attempt, reasonOf, type AttemptOutcome } from './http-call.ts';
import type { AdapterCall, AdapterResult } from './adapter.ts';

/**
 * Reads an order, its shipments, and its refunds net of the ones the payments ledger reversed, for
 * `lookup_order` (bounded read: 3 attempts). Returns only the fields the next decision needs. All
 * four records must answer in full ({@link orderReadOf}); a partial answer is tried again and, if
 * it stays partial, fails `order_system_unavailable` — never read as "no shipments", "nothing
 * refunded" or "nothing reversed" (docs/decisions/0771-a-partial-order-read-is-no-read.md).
 */
export async function lookupOrder(call: AdapterCall): Promise<AdapterResult> {
  const id = encodeURIComponent(String(call.args.orderId));
  for (let n = 1; n <= 3; n++) {
    const timeout = Math.max(1, Math.min(call.deadlineMs - Date.now(), 5000));
    const [order, shipments, refunds, reversals] = await Promise.all([
      attempt(`${call.stagingUrl}/orders/${id}`, {}, timeout),
      attempt(`${call.stagingUrl}/orders/${id}/shipments`, {}, timeout),
      attempt(`${call.stagingUrl}/ledger/refunds?orderId=${id}`, {}, timeout),
      attempt(`${call.stagingUrl}/ledger/reversals?orderId=${id}`, {}, timeout),
    ]);
    if (order.kind === 'response' && order.status === 404)
      return { status: 'failed', reason: 'order_not_found', retryable: false, attempts: n };
    const data = orderReadOf({ order, shipments, refunds, reversals });
    if (data) return { status: 'succeeded', attempts: n, evidenceRef: null, data };
    await new Promise((r) => setTimeout(r, 100 * n));
  }
  return { status: 'failed', reason: 'order_system_unavailable', retryable: true, attempts: 3 };
}

/** The body of a 200 answer, or null for no answer or another status. */
function okBody(res: AttemptOutcome): Record<string, unknown> | null {
  return res.kind === 'response' && res.status === 200 ? res.body : null;
}

/** The items of a 200 answer's `key` list as objects, or null when the answer is not a whole list ({@link wholeList}). */
function listed(res: AttemptOutcome, key: string): Array<Record<string, unknown>> | null {
  return wholeList(okBody(res), key, (row) => row);
}

/**
 * Cents refunded on an order and not reversed: the sum of the listed refunds' `amountCents`,
 * leaving out each refund a listed reversal names (`refundId`; a reversal undoes its whole
 * refund). Null when a refund's amount is not an integer or a refund or reversal has no id.
 */
function netRefundedCents(refunds: Array<Record<string, unknown>>, reversals: Array<Record<string, unknown>>): number | null {
  if (!reversals.every((v) => typeof v.refundId === 'string')) return null;
  if (!refunds.every((r) => typeof r.refundId === 'string' && Number.isSafeInteger(r.amountCents))) return null;
  const reversed = new Set(reversals.map((v) => v.refundId as string));
  return refunds.filter((r) => !reversed.has(r.refundId as string)).reduce((sum, r) => sum + (r.amountCents as number), 0);
}

/**
 * What `lookup_order` reports, from the four answers, or null when any of them is not a whole
 * answer: the order a 200 with an integer `paid` (cents), the shipments a 200 with a `shipments`
 * list, the refunds and reversals 200s with their lists ({@link netRefundedCents}). A listing that
 * failed or came without its list says nothing about the order's shipments, refunds or reversals
 * (what a system of record sends is untrusted, ADR 0640), so it is never read as an empty one;
 * `refunded` is net of reversals, as the refund limits count it (ADR 0771).
 */
function orderReadOf(a: Record<'order' | 'shipments' | 'refunds' | 'reversals', AttemptOutcome>): Record<string, unknown> | null {
  const o = okBody(a.order);
  const shipmentList = okBody(a.shipments)?.shipments;
  const refunds = listed(a.refunds, 'refunds');
  const reversals = listed(a.reversals, 'reversals');
  if (!o || !Number.isSafeInteger(o.paid) || !Array.isArray(shipmentList) || !refunds || !reversals) return null;
  const refunded = netRefundedCents(refunds, reversals);
  if (refunded === null) return null;
  return {
    orderId: o.id,
    status: o.status,
    region: o.region,
    paid: ((o.paid as number) / 100).toFixed(2),
    refunded: (refunded / 100).toFixed(2),
    shipments: shipmentList.length,
  };
}

/**
 * Shipments of an order, oldest first (the order system's listing order), or null when read-back
 * cannot tell: no answer, another status, or a body that is not a list of shipments each with an id
 * (what a system of record sends is untrusted, ADR 0640: a missing list is not "no shipments", which
 * would make a baseline too low and an earlier shipment look like this reship's; ADR 0665).
 */
async function listShipments(stagingUrl: string, orderId: string): Promise<ListedShipment[] | null> {
  const res = await attempt(`${stagingUrl}/orders/${encodeURIComponent(orderId)}/shipments`, {}, 5000);
  return wholeList(okBody(res), 'shipments', listedShipment);
}

/** Shipment count of an order, or null when read-back cannot tell. */
async function shipmentCount(stagingUrl: string, orderId: string): Promise<number | null> {
  return (await listShipments(stagingUrl, orderId))?.length ?? null;
}

/**
 * `reship_order` (order system, no idempotency key): exactly one attempt per dispatch.
 * - 201 → succeeded; another 4xx → failed (refused, nothing happened).
 * - connection refused → nothing was sent: `retry_safe`.
 * - response lost after the request was sent (reset) → read-back against the baseline committed
 *   before dispatch: one more shipment → succeeded; none → `retry_safe` (safe to repeat).
 * - timeout (the request may still be in flight) or read-back unavailable → unknown
 *   (failed_unknown, reconciliation; never retried automatically).
 */
export async function reshipOrder(call: AdapterCall): Promise<AdapterResult> {
  const orderId = String(call.args.orderId);
  const res = await attempt(
    `${call.stagingUrl}/orders/${encodeURIComponent(orderId)}/shipments`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${await call.token({ orderId })}` },
      body: '{}',
    },
    Math.max(1, Math.min(call.deadlineMs - Date.now(), 5000)),
  );
  if (res.kind === 'response') {
    if (res.status === 201) return { status: 'succeeded', data: res.body, evidenceRef: String(res.body.shipmentId ?? ''), attempts: 1 };
    if (res.status < 500) return { status: 'failed', reason: `${res.status}:${reasonOf(res.body)}`, retryable: false, attempts: 1 };
  }
  if (res.kind === 'no_response' && res.error === 'ECONNREFUSED')
    return { status: 'retry_safe', reason: 'connection_refused', attempts: 1 };
  if (res.kind === 'no_response' && (res.error === 'TimeoutError' || res.error === 'AbortError')) {
    return { status: 'unknown', reason: 'timeout_outcome_unknown', attempts: 1 };
  }
  return resolveByReadBack(call, orderId, res.kind === 'response' ? `http_${res.status}` : res.error);
}

/**
 * The baseline a reship commits with its claim: the order's shipment count (null when the read
 * failed) and when it was read (ISO 8601), which bounds the read-back's window.
 */
export async function reshipBaseline(stagingUrl: string, orderId: string): Promise<{ shipments: number | null; readAt: string }> {
  const readAt = new Date().toISOString();
  return { shipments: await shipmentCount(stagingUrl, orderId), readAt };
}

/**
 * Decides a shipment whose response was lost by reading the order's shipments back and comparing
 * with the baseline count committed before dispatch. Never re-dispatches. One shipment more is
 * this operation's only when no other reship of the order may have landed since the baseline was
 * read (`overlappingDispatches`): otherwise the new shipment may be the other's, and the outcome
 * is `unknown` for reconciliation (docs/decisions/0560-read-back-with-a-rival.md). Nor is it when
 * the order system created that shipment before this operation's write-ahead mark
 * (`dispatched_at`): it was made by someone outside Gatehouse between the baseline and the call,
 * and is `unknown` too (docs/decisions/0678-read-back-ignores-a-shipment-older-than-the-call.md).
 */
export async function resolveByReadBack(
  call: Pick<AdapterCall, 'stagingUrl' | 'baseline' | 'ledger' | 'operationKey'>,
  orderId: string,
  cause: string,
): Promise<AdapterResult> {
  const baseline = Number(call.baseline?.shipments ?? NaN);
  const listed = await listShipments(call.stagingUrl, orderId);
  const now = listed?.length ?? null;
  if (listed === null || now === null || !Number.isFinite(baseline))
    return { status: 'unknown', reason: `read_back_unavailable:${cause}`, attempts: 1 };
  if (now === baseline) return { status: 'retry_safe', reason: `not_executed:${cause}`, attempts: 1 };
  if (now !== baseline + 1) return { status: 'unknown', reason: `read_back_ambiguous:${baseline}->${now}`, attempts: 1 };
  // A baseline without its read time (stored before it had one) counts from the epoch: any rival is one.
  const since = baselineReadAt(call.baseline) ?? new Date(0);
  const rivals = await overlappingDispatches(call.ledger, { tool: 'reship_order', target: orderId, exceptKey: call.operationKey, since });
  if (rivals.length) return { status: 'unknown', reason: `read_back_ambiguous:concurrent_reship:${rivals.join(',')}`, attempts: 1 };
  // The one new shipment is the newest listed: its id is the evidence, as if the 201 had arrived —
  // unless it is older than this operation's dispatch mark, so no request of ours made it.
  const newest = listed.at(-1)!;
  const notOurs = await notOurShipment(call, newest);
  if (notOurs) return { status: 'unknown', reason: `read_back_ambiguous:${notOurs}`, attempts: 1 };
  return {
    status: 'succeeded',
    data: { orderId, shipmentId: newest.shipmentId, resolvedBy: 'read_back' },
    evidenceRef: newest.shipmentId,
    attempts: 1,
  };
}

/**
 * Why `shipment` cannot be shown to be this operation's request's, or null when it may be: the
 * order system created it before the operation's write-ahead mark (`operations.dispatched_at`,
 * written before the request is sent) → `shipment_before_dispatch`; the listing gave no readable
 * creation time (what a system of record sends is untrusted, ADR 0640) → `shipment_time_unreadable`.
 * An operation without a mark (the write-ahead switched off, tests only) is not judged by it.
 */
async function notOurShipment(call: Pick<AdapterCall, 'ledger' | 'operationKey'>, shipment: ListedShipment): Promise<string | null> {
  const op = await call.ledger.selectFrom('operations').select('dispatched_at').where('key', '=', call.operationKey).executeTakeFirst();
  if (!op?.dispatched_at) return null;
  if (!Number.isFinite(shipment.createdAtMs)) return 'shipment_time_unreadable';
  return shipment.createdAtMs < new Date(op.dispatched_at).getTime() ? 'shipment_before_dispatch' : null;
}
