import { z } from 'zod';
import { BodyTooLarge, fetchCapped, isOutageStatus, Refused, SystemError } from '@gatehouse/contracts';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { boundReason, boundText, MAX_AMOUNT_CENTS } from '@gatehouse/tools';
import type { ChangeRecordFacts } from './change.rules.ts';
import type { SupportFacts } from './support.rules.ts';

/**
 * An identifier a system of record sent (an order or change id, a tenant, a region, an
 * environment): compared with the requester's own, so it must arrive exact. 1–128 characters,
 * no control character. Anything else refuses the record rather than being changed.
 */
const recordId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^\p{Cc}]+$/u, 'has a control character');

/**
 * Free text a system of record sent (an order's status, a change's service or risk): its
 * secrets redacted and cut to the tool-output bound, like every untrusted string
 * (docs/product/invariants.md#untrusted-output). It is shown to approvers and stored in the
 * action's facts; the system is authoritative for its figures, not trusted with text.
 */
const recordText = z.string().transform(boundText);

/** The order fields a support decision reads (`GET /orders/:id`); any other field is dropped. */
const OrderRecordSchema = z.object({
  id: recordId,
  tenant: recordId,
  region: recordId,
  /**
   * Amount paid, integer cents, at most the largest amount the system holds
   * (`MAX_AMOUNT_CENTS`, docs/decisions/0689-the-largest-amount.md): a reship's approval is
   * granted for it, and a larger one could not be recorded.
   */
  paid: z.number().int().nonnegative().max(MAX_AMOUNT_CENTS),
  status: recordText,
});

/** The change fields a change decision reads (`GET /changes/:id`); any other field is dropped. */
const ChangeRecordSchema = z.object({
  id: recordId,
  tenant: recordId,
  environment: recordId,
  service: recordText,
  risk: recordText,
});

/**
 * A system of record answered a body that is not the record asked for (503, reason
 * `malformed_record`): it has not answered. The message names the service and the first fields.
 */
export class MalformedRecord extends SystemError {
  constructor(message: string) {
    super('malformed_record', message);
  }
}

/**
 * Validates `body` against `schema` and reduces it to the fields the rules read, text bounded.
 * @throws MalformedRecord naming the service (`what`) and its first problems (at most 3, each
 *   bounded) when the body is not such a record. The policy gateway retries the proposal, then
 *   stops the run (as when the service does not answer); the executor holds the step like an
 *   outage of the system of record, then stops the run past the outage ceiling
 *   (`dependency_unavailable`).
 */
function parseRecord<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`.slice(0, 200));
  throw new MalformedRecord(`${what} answered a malformed record: ${issues.join('; ')}`);
}

/** An order as the rules read it (R2–R4, R7–R9), from the order system's answer. @throws MalformedRecord when malformed ({@link parseRecord}). */
export function orderRecord(body: unknown): NonNullable<SupportFacts['order']> {
  return parseRecord(OrderRecordSchema, body, 'order system');
}

/** A change as the change rules read it, from the change service's answer. @throws MalformedRecord when malformed ({@link parseRecord}). */
export function changeRecord(body: unknown): ChangeRecordFacts {
  return parseRecord(ChangeRecordSchema, body, 'change service');
}

/**
 * A system of record refused a read (reason `record_refused`, 422): it answered a 4xx other than
 * 404 (no such record), 408 and 429 (outages, `isOutageStatus`) — it understood the request and rejected it. Not an
 * outage: the same read gets the same answer, so it is not waited for as one. `status` is the
 * HTTP status; `refusal` the system's own reason (`error.reason` of its body, bounded and redacted
 * as untrusted text, ADR 0640), or null when it gave none.
 */
export class RecordRefused extends Refused {
  readonly status: number;
  readonly refusal: string | null;
  constructor(system: string, status: number, refusal: string | null) {
    super('record_refused', `${system} refused the read (${status}${refusal ? ` ${refusal}` : ''})`);
    this.status = status;
    this.refusal = refusal;
  }
}

/** The `error.reason` a refusal's JSON body carries, redacted and bounded (`boundReason`: at most 120 characters, marked where cut), or null. */
async function refusalReason(res: Response): Promise<string | null> {
  const body = (await res.json().catch(() => null)) as { error?: { reason?: unknown } } | null;
  const reason = body?.error?.reason;
  return typeof reason === 'string' && reason !== '' ? boundReason(reason) : null;
}

/** How long an authoritative read of a system of record may take, ms. */
export const RECORD_READ_TIMEOUT_MS = 5000;

/**
 * The JSON body of `GET url` on a system of record (`system` names it in messages, e.g. "order
 * system"), or null when it answers 404; bounded by {@link RECORD_READ_TIMEOUT_MS} and the
 * downstream body cap. An outage of the system is told apart from a bad answer: the first holds
 * the step that reads (its job waits without using an attempt, and the run's wait is credited,
 * docs/decisions/0110-outage-time.md), the second is retried and then becomes the step's dead
 * letter (0070).
 * @throws DependencyUnavailable(`system_of_record`) when the request is refused, times out or is
 *   cut, or is answered 408, 429 or 5xx.
 * @throws RecordRefused for another 4xx: the system understood the read and rejected it (a
 *   refusal, not an outage; the gateway retries it then dead-letters the step, like any bad answer).
 * @throws BodyTooLarge past the body cap; MalformedRecord for a 2xx body that is not JSON (held
 *   by the executor, retried then dead-lettered by the gateway, as a record of the wrong shape);
 *   Error for any other status (a 1xx or 3xx).
 */
export async function readRecordJson(url: string, system: string): Promise<unknown> {
  const unavailable = (why: string, cause?: unknown): DependencyUnavailable =>
    new DependencyUnavailable('system_of_record', `${system}: ${why}`, { cause });
  let res: Response;
  try {
    res = await fetchCapped(url, { signal: AbortSignal.timeout(RECORD_READ_TIMEOUT_MS) });
  } catch (err) {
    if (err instanceof BodyTooLarge) throw err;
    throw unavailable(`no answer (${(err as Error).message})`, err);
  }
  const outage = isOutageStatus(res.status);
  if (outage || res.status === 404) await res.body?.cancel().catch(() => undefined);
  if (res.status === 404) return null;
  if (outage) throw unavailable(`answered ${res.status}`);
  if (res.status >= 400) throw new RecordRefused(system, res.status, await refusalReason(res));
  if (!res.ok) {
    await res.body?.cancel().catch(() => undefined);
    throw new Error(`${system} answered ${res.status}`);
  }
  try {
    return await res.json();
  } catch (err) {
    if (err instanceof BodyTooLarge) throw err;
    // A 200 that is not JSON is not the record asked for, like a record of the wrong shape.
    if (err instanceof SyntaxError) throw new MalformedRecord(`${system} answered a body that is not JSON`);
    throw unavailable(`its answer was cut (${(err as Error).message})`, err);
  }
}
