import { findTool, type NormalizedArgs, type ToolDefinition } from './catalog.ts';
import { NormalizationError } from './normalize.ts';
import { duplicateJsonKey } from './json-keys.ts';
import { containsSecret, redactSecrets } from './output-boundary.ts';
import { testFaults } from '@gatehouse/contracts';

/** A bounded validation result returned to the model as the call's function_call_output. */
export interface ValidationFailure {
  ok: false;
  error: 'unknown_tool' | 'malformed_arguments' | 'invalid_arguments';
  /** At most 5 issues, each at most 200 characters. */
  issues: string[];
}

export interface ParsedProposal {
  ok: true;
  tool: ToolDefinition;
  args: NormalizedArgs;
  target: string;
}

/** Issues are model-influenced text: redacted, then bounded to 200 characters. */
const bound = (raw: string): string => {
  const s = redactSecrets(raw);
  return s.length > 200 ? `${s.slice(0, 197)}...` : s;
};

/**
 * Why an argument holding a secret shape is refused (after its path). Names no shape's literal
 * marker, so the issue itself is never redacted.
 */
const SECRET_ISSUE =
  'text may not contain a secret or a token (an API key, a bearer token, a JWT or a planted canary); write the argument without it';

/** C0 control characters other than tab, line feed and carriage return (NUL included). */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

/**
 * The path of the first key or string in `value` for which `bad` holds (dot-separated, `(root)`
 * for the top; a bad key is reported at the path of its object, so the key itself is never
 * echoed). Returns null when no string is bad.
 */
function firstTextAt(value: unknown, path: string, bad: (text: string) => boolean): string | null {
  if (typeof value === 'string') return bad(value) ? path || '(root)' : null;
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) {
      const hit = firstTextAt(v, `${path}.${i}`, bad);
      if (hit) return hit;
    }
    return null;
  }
  if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (bad(k)) return path || '(root)';
      const hit = firstTextAt(v, path ? `${path}.${k}` : k, bad);
      if (hit) return hit;
    }
  }
  return null;
}

/**
 * Text the ledger cannot store or a person should never be shown: a NUL (Postgres `jsonb` and
 * `text` refuse U+0000), another C0 control character (terminal escapes in an approver's view),
 * or an unpaired UTF-16 surrogate (not valid Unicode).
 */
const unstorable = (text: string): boolean => CONTROL.test(text) || !text.isWellFormed();

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_STRICT_PARSING=1` opens the closed
 * parsing: unknown fields are accepted and carried into the action's arguments (control-removed
 * test: an `approved_by` field then reaches the adapter).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function strictParsingRemoved(): boolean {
  return testFaults().disableStrictParsing;
}

/** The fields of `data` the tool's contract does not name, kept when they are strings or numbers. */
function unknownFields(tool: ToolDefinition, data: Record<string, unknown>): NormalizedArgs {
  const known = new Set(Object.keys(tool.args.shape));
  return Object.fromEntries(
    Object.entries(data).filter(([k, v]) => !known.has(k) && (typeof v === 'string' || typeof v === 'number')),
  ) as NormalizedArgs;
}

/**
 * Whether a JSON number token `source` is a plain decimal that parses to exactly the value it
 * shows: no exponent, and equal to `value`'s own decimal text once trailing fractional zeros are
 * dropped (`30.0` and `1.10` are; `3e1` and `49.999999999999999`, which parses to 50, are not).
 */
function writtenAsParsed(source: string, value: number): boolean {
  if (!/^-?\d+(\.\d+)?$/.test(source)) return false;
  const shown = source.includes('.') ? source.replace(/\.?0+$/, '') : source;
  return shown === String(value) || (shown === '-0' && Object.is(value, -0));
}

/**
 * Closed parsing of a function_call: known tool, `arguments` a JSON object text (one value, no
 * trailing data, each object naming a key once: {@link duplicateJsonKey}) whose numbers are plain decimals the parse keeps exactly ({@link writtenAsParsed})
 * and whose keys and strings carry no NUL, control character or unpaired surrogate and no secret
 * shape ({@link containsSecret}: what the final message's redaction would redact), exactly the
 * contract's fields with the right types, then normalization.
 * Never throws; any failure is a {@link ValidationFailure}.
 */
export function parseProposal(name: string, rawArguments: string): ParsedProposal | ValidationFailure {
  const tool = findTool(name);
  if (!tool) return { ok: false, error: 'unknown_tool', issues: [`no tool named ${redactSecrets(name).slice(0, 64)}`] };
  let value: unknown;
  const altered: string[] = [];
  try {
    value = JSON.parse(rawArguments, (key, v: unknown, context?: { source?: string }) => {
      if (typeof v === 'number' && context?.source !== undefined && !writtenAsParsed(context.source, v)) altered.push(key);
      return v;
    });
  } catch {
    return { ok: false, error: 'malformed_arguments', issues: ['arguments are not one JSON object'] };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { ok: false, error: 'malformed_arguments', issues: ['arguments must be a JSON object'] };
  }
  // Two members with one name: JSON.parse keeps the last, a reader of the raw call the first (ADR 0687).
  if (duplicateJsonKey(rawArguments) !== null) {
    return { ok: false, error: 'malformed_arguments', issues: ['arguments name a key twice: write each key once'] };
  }
  // A number the parse would change (an exponent, more digits than a double keeps) is refused, so
  // what is normalized is what the model wrote: `3e1` is not "30.00" (docs/product/policy-rules.md#amounts).
  if (altered.length) {
    return {
      ok: false,
      error: 'invalid_arguments',
      issues: altered.slice(0, 5).map((k) => bound(`${k}: write numbers as plain decimals, without an exponent or more digits than kept`)),
    };
  }
  const unsafe = firstTextAt(value, '', unstorable);
  if (unsafe) {
    return {
      ok: false,
      error: 'invalid_arguments',
      issues: [bound(`${unsafe}: text may not contain NUL, control characters or unpaired surrogates`)],
    };
  }
  // A secret or canary in an argument would reach an approver, the audit and a downstream system
  // (docs/decisions/0580-secrets-in-tool-arguments.md): refused, named by its path, never echoed.
  const secret = firstTextAt(value, '', containsSecret);
  if (secret) return { ok: false, error: 'invalid_arguments', issues: [bound(`${secret}: ${SECRET_ISSUE}`)] };
  const loose = strictParsingRemoved();
  const checked = (loose ? tool.args.loose() : tool.args).safeParse(value);
  if (!checked.success) {
    return {
      ok: false,
      error: 'invalid_arguments',
      issues: checked.error.issues.slice(0, 5).map((i) => bound(`${i.path.join('.') || '(root)'}: ${i.message}`)),
    };
  }
  try {
    const args = loose ? { ...unknownFields(tool, checked.data), ...tool.normalize(checked.data) } : tool.normalize(checked.data);
    return { ok: true, tool, args, target: tool.target(args) };
  } catch (err) {
    if (err instanceof NormalizationError) {
      return { ok: false, error: 'invalid_arguments', issues: [bound(`${err.field}: ${err.message}`)] };
    }
    throw err;
  }
}
