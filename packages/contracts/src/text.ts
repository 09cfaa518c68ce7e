import { z } from 'zod';

/** A UTF-16 high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * True when the ledger can store `s` as it is: no NUL (Postgres `text` and `jsonb` refuse
 * U+0000) and well-formed UTF-16 (a lone surrogate is not Unicode, and `jsonb` refuses its escape).
 */
export function isStorableText(s: string): boolean {
  return !s.includes('\u0000') && s.isWellFormed();
}

/**
 * Text the ledger can store, from text Gatehouse must keep but did not write (the model's
 * output): each NUL and each lone surrogate becomes its six-character JSON escape (`\u0000`,
 * `\ud800`), nothing else changes. Applied to a function_call's `arguments`, an escaped character
 * inside a JSON string parses back to itself (and parsing then refuses it), one outside a string
 * is malformed JSON: either way the call gets a validation result, never a ledger error.
 */
export function escapeUnstorable(s: string): string {
  if (isStorableText(s)) return s;
  const escape = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  return s.replaceAll('\u0000', '\\u0000').replace(LONE_SURROGATE, escape);
}

/** A zod string for API input text that the ledger can store (see {@link isStorableText}). */
export const storableString = (): z.ZodString =>
  z.string().refine(isStorableText, { message: 'text may not contain NUL characters or unpaired surrogates' });

/**
 * A zod string for text a person writes to the agent (a ticket, a follow-up): storable (see
 * {@link storableString}), 1–`max` characters, and not blank — at least one character other than
 * whitespace. A blank follow-up would still supersede every unclaimed action and void its
 * approvals (docs/decisions/0681-blank-text-is-refused.md).
 */
export const personText = (max: number): z.ZodString =>
  storableString().min(1).max(max).regex(/\S/, { message: 'text may not be blank: write at least one character other than whitespace' });
