import { UserError } from '@gatehouse/contracts';

/**
 * Normalization happens once, here; the normalized object feeds policy, the approval display,
 * the action digest, the idempotency key and the adapter alike (docs/product/policy-rules.md#amounts: "30.00", 30 and 30.0
 * are the same amount).
 */

/** Thrown for a value that cannot be normalized; `field` names the argument. */
export class NormalizationError extends UserError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('invalid_arguments', message);
    this.field = field;
  }
}

/** A decimal of at most two significant decimals; zeros written past the second are allowed (ADR 0784). */
const DECIMAL = /^-?\d{1,9}(\.\d{1,2}0*)?$/;

/**
 * The largest amount the system holds, integer cents: 2,147,483,647 (21,474,836.47 in currency
 * units), the largest value of the ledger's `integer` amount columns (`approvals.amount_cents`)
 * and of the staging payments ledger's. Every amount enters through {@link toCents} (a tool's
 * arguments) or an order record's `paid` (policy's `orderRecord`), and both refuse a larger one
 * there, before anything is recorded (docs/decisions/0689-the-largest-amount.md).
 */
export const MAX_AMOUNT_CENTS = 2_147_483_647;

/** {@link MAX_AMOUNT_CENTS} in currency units, as the model and people read it. */
const MAX_AMOUNT_TEXT = `${Math.floor(MAX_AMOUNT_CENTS / 100)}.${String(MAX_AMOUNT_CENTS % 100).padStart(2, '0')}`;

/**
 * Converts a decimal amount in currency units (string `"30.00"`, `"30"`, `"30.000"` or number
 * `30`, `30.0`) to integer cents. Accepts at most two decimals that are not zero (zeros written
 * past the second change nothing, as in a JSON number: ADR 0784), at most 9 integer digits, and
 * a size of at most {@link MAX_AMOUNT_CENTS} (21474836.47).
 * @throws NormalizationError for a non-zero third decimal, exponents, `NaN`/`Infinity`,
 *   negative zero, non-numeric strings, or an amount larger than {@link MAX_AMOUNT_CENTS}.
 */
export function toCents(value: string | number, field = 'amount'): number {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new NormalizationError(field, 'amount must be a finite number');
    if (Object.is(value, -0)) throw new NormalizationError(field, 'negative zero is not an amount');
    text = String(value);
  } else {
    text = value.trim();
  }
  if (!DECIMAL.test(text)) {
    throw new NormalizationError(field, 'amount must be a decimal with at most two decimals, e.g. "30.00"');
  }
  const negative = text.startsWith('-');
  const [whole = '0', frac = ''] = text.replace('-', '').split('.');
  const cents = Number(whole) * 100 + Number(frac.slice(0, 2).padEnd(2, '0'));
  if (negative && cents === 0) throw new NormalizationError(field, 'negative zero is not an amount');
  if (cents > MAX_AMOUNT_CENTS) {
    throw new NormalizationError(
      field,
      negative ? `amount must be at least -${MAX_AMOUNT_TEXT}` : `amount must be at most ${MAX_AMOUNT_TEXT}`,
    );
  }
  return negative ? -cents : cents;
}

/** Longest free text of a tool argument (a refund's reason, a change's note), characters, as the contract says. */
export const MAX_FREE_TEXT_CHARS = 240;

/** Invisible format characters (zero-width space and joiners, soft hyphen, word joiner, BOM…). */
const FORMAT_CHARS = /\p{Cf}/gu;

/**
 * One canonical form of a free-text argument (a refund's reason, a change's note), so the same
 * text written two ways is one argument for the proposal dedupe, the action digest, the
 * idempotency key and the approver alike (docs/decisions/0778-free-text-in-one-form.md):
 * compatibility forms folded and accents composed (NFKC: `cafe\u0301` and full-width `ｃａｆé` are
 * `café`), invisible format characters dropped, every run of white space (tabs, line breaks,
 * no-break spaces) one space, and the ends trimmed. Letter case is kept: it is the writer's.
 * @throws NormalizationError when the canonical text is longer than {@link MAX_FREE_TEXT_CHARS}
 *   (NFKC can unfold one character into several).
 */
export function canonicalText(value: string, field: string): string {
  const text = value.normalize('NFKC').replace(FORMAT_CHARS, '').replace(/\s+/gu, ' ').trim();
  if (text.length > MAX_FREE_TEXT_CHARS) {
    throw new NormalizationError(field, `${field} must be at most ${MAX_FREE_TEXT_CHARS} characters once normalized`);
  }
  return text;
}

/** Order ids are canonical upper case: `o-1002` means `O-1002` (docs/decisions/0004). */
export const ORDER_ID = /^[A-Z]-\d{4}$/;

/**
 * Canonicalizes an order id (trim, upper case).
 * @throws NormalizationError when the result is not `<letter>-<4 digits>`.
 */
export function canonicalOrderId(value: string, field = 'orderId'): string {
  const id = value.trim().toUpperCase();
  if (!ORDER_ID.test(id)) throw new NormalizationError(field, 'orderId must look like O-1002');
  return id;
}

/** Change ids are canonical upper case: `chg-101` means `CHG-101` (docs/decisions/0004). */
export const CHANGE_ID = /^CHG-\d{1,6}$/;

/**
 * Canonicalizes a change id (trim, upper case).
 * @throws NormalizationError when the result is not `CHG-<digits>`.
 */
export function canonicalChangeId(value: string, field = 'changeId'): string {
  const id = value.trim().toUpperCase();
  if (!CHANGE_ID.test(id)) throw new NormalizationError(field, 'changeId must look like CHG-101');
  return id;
}

/** Plan ids of `prepare_change` (docs/product/users-and-tools.md#change-pack): `plan_` + 16 lowercase alphanumerics. */
export const PLAN_ID = /^plan_[a-z0-9]{16}$/;

/**
 * A free-text note (≤ 240 chars) in its {@link canonicalText} form, or `null`; blank becomes
 * `null`, so "no note" has one form.
 * @throws NormalizationError for anything else, or a note longer than 240 chars once normalized.
 */
export function noteOrNull(value: unknown, field = 'note'): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'string') throw new NormalizationError(field, 'note must be a string or null');
  const t = canonicalText(value, field);
  return t === '' ? null : t;
}
