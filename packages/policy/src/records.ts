import { z } from 'zod';
import { boundText } from '@gatehouse/tools';
import type { ChangeRecordFacts } from './change.rules.ts';
import type { SupportFacts } from './support.rules.ts';

/**
 * A string a system of record sent: its secrets redacted and cut to the tool-output bound, like
 * every untrusted string (docs/product/invariants.md#untrusted-output). An order's status or a
 * change's service is shown to approvers and stored in the action's facts; the order system is
 * authoritative for the figures, not trusted with text.
 */
const recordText = z.string().transform(boundText);

/** The order fields a support decision reads (`GET /orders/:id`); any other field is dropped. */
const OrderRecordSchema = z.object({
  id: recordText,
  tenant: recordText,
  region: recordText,
  /** Amount paid, integer cents. */
  paid: z.number().int().nonnegative(),
  status: recordText,
});

/** The change fields a change decision reads (`GET /changes/:id`); any other field is dropped. */
const ChangeRecordSchema = z.object({
  id: recordText,
  tenant: recordText,
  environment: recordText,
  service: recordText,
  risk: recordText,
});

/**
 * Validates `body` against `schema` and reduces it to the fields the rules read, strings bounded.
 * @throws Error naming the record (`what`) and its first problems (at most 3, each bounded) when
 *   the body is not such a record: a system of record that answers malformed data has not
 *   answered, and the job is retried like one that did not answer at all.
 */
function parseRecord<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`.slice(0, 200));
  throw new Error(`${what} answered a malformed record: ${issues.join('; ')}`);
}

/** An order as the rules read it (R2–R4, R7–R9), from the order system's answer. @throws Error when malformed ({@link parseRecord}). */
export function orderRecord(body: unknown): NonNullable<SupportFacts['order']> {
  return parseRecord(OrderRecordSchema, body, 'order system');
}

/** A change as the change rules read it, from the change service's answer. @throws Error when malformed ({@link parseRecord}). */
export function changeRecord(body: unknown): ChangeRecordFacts {
  return parseRecord(ChangeRecordSchema, body, 'change service');
}
