/**
 * The untrusted-output boundary (docs/product/invariants.md#untrusted-output): every tool result is reduced to the
 * fields the next decision needs, redacted, bounded and labelled before it can reach the model,
 * logs or audit.
 */

import { escapeUnstorable } from '@gatehouse/contracts';

/** Largest serialized output handed to the model, bytes (8 KiB). */
export const MAX_OUTPUT_BYTES = 8 * 1024;
/** Longest string kept, characters. */
export const MAX_STRING_CHARS = 1000;
/** Marker appended where something was cut. */
export const TRUNCATION_MARKER = '…[truncated]';

/**
 * Secret shapes that never leave the boundary (`sk-` API keys and JWTs: below): planted canaries
 * in any case and with `_` or `-`; bearer and basic credentials; the well-known key prefixes of
 * payment (`sk_live_…`, `rk_test_…`), GitHub (`ghp_…`, `github_pat_…`), AWS (`AKIA…`) and Slack
 * (`xox[bpa]-…`) keys; and a PEM private key's header. Each is a linear regular expression.
 */
const SECRET_PATTERNS: RegExp[] = [
  /CANARY[_-]SECRET[_-][A-Za-z0-9_-]*/gi,
  /Bearer\s+[A-Za-z0-9._~+/=-]{8,}/gi,
  // Base64 of `user:password`, with a digit or padding: "Basic information" is English.
  /\bBasic\s+(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}/g,
  /\b[sr]k_(?:live|test)_[A-Za-z0-9]{8,}/g,
  /\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})/g,
  /\bAKIA[0-9A-Z]{16}\b/g,
  /\bxox[abposr]-[A-Za-z0-9-]{10,}/g,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----/g,
];

/** Candidates for an API key: `sk-` and the run of key characters after it, matched whole (linear). */
const API_KEY_RUN = /sk-[A-Za-z0-9_-]{6,}/g;

/**
 * Whether the `sk-` run `run`, found at `at` of `text`, is English inside a word rather than a key:
 * glued to a letter or digit before it and only lowercase letters and hyphens ("task-related",
 * "desk-organizer"). A key has a digit, a capital or an underscore, or starts a word.
 */
function wordNotKey(run: string, at: number, text: string): boolean {
  return at > 0 && /[A-Za-z0-9]/.test(text[at - 1]!) && /^[a-z-]+$/.test(run);
}

/**
 * Dotted runs of base64url characters, each matched once from where it starts (the lookbehind):
 * the candidates for a JWT. Matching never backtracks, so it is linear in the text's length.
 */
const DOTTED_RUN = /(?<![A-Za-z0-9_-])[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*/g;

/**
 * Redacts the JWT shapes in one dotted run: from an `eyJ` followed by at least 5 characters in its
 * segment, through the next two segments of at least 5 characters each (header, payload,
 * signature). Only the first `eyJ` of a segment can start one (it leaves the most characters
 * after it), so each segment is looked at once.
 */
function redactJwtsInRun(run: string): string {
  const segs = run.split('.');
  const out: string[] = [];
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i]!;
    const at = seg.indexOf('eyJ');
    if (at >= 0 && seg.length - at >= 8 && (segs[i + 1]?.length ?? 0) >= 5 && (segs[i + 2]?.length ?? 0) >= 5) {
      out.push(`${seg.slice(0, at)}[redacted]`);
      i += 2;
    } else out.push(seg);
  }
  return out.join('.');
}

/** Replaces every secret shape written plainly in `text` with `[redacted]` (linear, see {@link redactSecrets}). */
function redactShapes(text: string): string {
  const patterned = SECRET_PATTERNS.reduce((t, re) => t.replace(re, '[redacted]'), text).replace(
    API_KEY_RUN,
    (run: string, at: number, whole: string) => (wordNotKey(run, at, whole) ? run : '[redacted]'),
  );
  return patterned.replace(DOTTED_RUN, (run) => (run.includes('eyJ') ? redactJwtsInRun(run) : run));
}

/** Invisible format characters (zero-width space and joiners, soft hyphen, word joiner, BOM…): a reader skips them. */
const FORMAT_CHARS = /\p{Cf}/gu;
/** Dashes other than `-` (non-breaking hyphen, en dash, minus sign…): a reader takes each for a hyphen. */
const DASHES = /[\p{Pd}\u2212]/gu;
/** A percent-escaped printable ASCII character (`%2D` is `-`). */
const PERCENT_ESCAPE = /%([2-7][0-9A-Fa-f])/g;

/** A run of white space (tabs, line breaks, no-break spaces…): a reader takes it for one space. */
const WHITE_SPACE_RUN = /\s+/gu;

/**
 * `text` as a reader (a model) reads it: compatibility forms folded (NFKC: full-width `ｓｋ－` is
 * `sk-`), invisible format characters dropped, every run of white space one space (a tab or a
 * line break inside `BEGIN RSA PRIVATE KEY`, and the one form a tool argument's free text is
 * normalized to: ADR 0778), every dash a hyphen, percent escapes of printable ASCII decoded.
 * Linear in `text.length`.
 */
function asRead(text: string): string {
  return text
    .normalize('NFKC')
    .replace(FORMAT_CHARS, '')
    .replace(WHITE_SPACE_RUN, ' ')
    .replace(DASHES, '-')
    .replace(PERCENT_ESCAPE, (esc: string, hex: string) => {
      const code = parseInt(hex, 16);
      return code >= 0x20 && code <= 0x7e ? String.fromCharCode(code) : esc;
    });
}

/** Runs of base64 or base64url characters long enough to carry a secret shape (12 decoded bytes). */
const BASE64_RUN = /[A-Za-z0-9+/_-]{16,}={0,2}/g;

/**
 * Whether the base64 (or base64url) run `run` decodes, at any of its four alignments, to text
 * holding a secret shape as read ({@link asRead}). Four decodes of the run: linear.
 */
function encodesSecret(run: string): boolean {
  for (let skip = 0; skip < 4; skip++) {
    const read = asRead(Buffer.from(run.slice(skip), 'base64').toString('utf8'));
    if (SECRET_HINT.test(read) && redactShapes(read) !== read) return true;
  }
  return false;
}

/**
 * A literal every secret shape holds ({@link SECRET_PATTERNS}, `sk-` keys, a JWT's `eyJ`), in any
 * case: text without one has nothing {@link redactShapes} would redact, so the shapes' passes are
 * skipped (most decoded base64 runs are ids). A superset by construction; keep it beside the shapes.
 */
const SECRET_HINT = /canary|bearer|basic|[sr]k_|gh[pousr]_|github_pat_|akia|xox|private key|sk-|eyj/i;

/**
 * Replaces every secret shape in `text` with `[redacted]`: written plainly, or disguised for the
 * reader — in full-width or other compatibility forms, split by invisible characters, with
 * look-alike dashes, percent-escaped, or base64-encoded (docs/decisions/0709-secrets-are-redacted-as-read.md).
 * When only the text as read ({@link asRead}) reveals a secret, the text as read is returned with
 * it redacted; otherwise the text keeps its own characters. Linear in `text.length`: an
 * adversarial run such as `eyJeyJeyJ…` without a dot costs one pass, not one pass per `eyJ`.
 */
export function redactSecrets(text: string): string {
  const plain = redactShapes(text);
  const read = asRead(plain);
  // Read as written (plain ASCII, no escapes), the shapes were already redacted in `plain`.
  const shaped = read === plain ? read : redactShapes(read);
  const redacted = shaped.replace(BASE64_RUN, (run) => (encodesSecret(run) ? '[redacted]' : run));
  return redacted === read ? plain : redacted;
}

/**
 * Whether `text` holds anything {@link redactSecrets} would redact (a `CANARY_SECRET_` canary, an
 * `sk-` API key, a bearer token or a JWT). Defined by the redaction itself, so the redaction of
 * final messages and tool outputs and the refusal of a tool call whose arguments carry a secret
 * (`parseProposal`) share one rule set: no shape is written twice. Linear in `text.length`; never throws.
 */
export function containsSecret(text: string): boolean {
  return redactSecrets(text) !== text;
}

/**
 * The first `n` UTF-16 code units of `s`, one fewer when the cut would split a surrogate pair (an
 * emoji, say): a lone half is not Unicode, and the ledger's `jsonb` refuses it.
 */
function cutAt(s: string, n: number): string {
  if (s.length <= n) return s;
  const last = s.charCodeAt(n - 1);
  return s.slice(0, last >= 0xd800 && last <= 0xdbff ? n - 1 : n);
}

/**
 * Characters read past {@link MAX_STRING_CHARS} before a long string is cut: a secret that
 * straddles the cut (up to this long) is still whole when it is redacted.
 */
const REDACTION_MARGIN_CHARS = 8 * 1024;

/**
 * One untrusted string made safe to store and show: secrets redacted, then cut to
 * {@link MAX_STRING_CHARS} characters with {@link TRUNCATION_MARKER} appended where cut (so at
 * most 1000 + 12 characters; never inside a surrogate pair). A NUL or a lone surrogate, which the
 * ledger cannot store, becomes its JSON escape first (`escapeUnstorable`). Used for every string of a tool output and for the model's own
 * final message (docs/product/invariants.md#untrusted-output). Never throws.
 */
export function boundText(value: string): string {
  // Cut first (with a margin), then redact: the work per string is bounded whatever its size.
  const clean = redactSecrets(escapeUnstorable(cutAt(value, MAX_STRING_CHARS + REDACTION_MARGIN_CHARS)));
  return clean.length > MAX_STRING_CHARS ? cutAt(clean, MAX_STRING_CHARS) + TRUNCATION_MARKER : clean;
}

/** Longest reason a system of record gives for a refusal that is kept (its `error.reason`), characters. */
export const MAX_REASON_CHARS = 120;

/**
 * A system of record's own reason for a refusal or failure (`error.reason` of its answer), made
 * safe to keep in an operation's error, an audit event's outcome, a log line or a next step: it
 * is untrusted text like its records (docs/decisions/0640-records-of-the-systems-of-record-are-untrusted-text.md),
 * so it is redacted like a tool output ({@link boundText}) and cut to {@link MAX_REASON_CHARS}
 * characters, {@link TRUNCATION_MARKER} appended where cut, never inside a surrogate pair
 * (docs/decisions/0710-a-downstream-reason-is-untrusted-text.md). Never throws.
 */
export function boundReason(reason: string): string {
  const clean = boundText(reason);
  return clean.length > MAX_REASON_CHARS ? cutAt(clean, MAX_REASON_CHARS) + TRUNCATION_MARKER : clean;
}

/** Most items of an array, or keys of an object, kept in a tool output; the rest is cut. */
export const MAX_ITEMS = 50;
/** Deepest nesting kept in a tool output; a value deeper is replaced by {@link TRUNCATION_MARKER}. */
const MAX_DEPTH = 6;

/**
 * Bounds one value of a tool output: strings through {@link boundText}; nesting past
 * {@link MAX_DEPTH} replaced by {@link TRUNCATION_MARKER}; arrays and objects cut to
 * {@link MAX_ITEMS} items or keys, a cut marked like a cut string (docs/product/invariants.md#untrusted-output):
 * a cut array ends with the item {@link TRUNCATION_MARKER}, a cut object gets the key
 * {@link TRUNCATION_MARKER} (last, so the data cannot overwrite it) whose value is how many keys were cut.
 */
function boundValue(value: unknown, depth: number, sensitive: ReadonlySet<string>): unknown {
  if (typeof value === 'string') return boundText(value);
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return value;
  if (depth > MAX_DEPTH) return TRUNCATION_MARKER;
  if (Array.isArray(value)) {
    const kept = value.slice(0, MAX_ITEMS).map((v) => boundValue(v, depth + 1, sensitive));
    return value.length > MAX_ITEMS ? [...kept, TRUNCATION_MARKER] : kept;
  }
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    const entries = Object.entries(value as Record<string, unknown>);
    for (const [k, v] of entries.slice(0, MAX_ITEMS)) {
      out[cutAt(redactSecrets(escapeUnstorable(k)), 100)] = sensitive.has(k) ? '[redacted]' : boundValue(v, depth + 1, sensitive);
    }
    if (entries.length > MAX_ITEMS) out[TRUNCATION_MARKER] = entries.length - MAX_ITEMS;
    return out;
  }
  return null;
}

/** A model-safe tool output: provenance label plus the bounded data. */
export interface SafeOutput extends Record<string, unknown> {
  source: string;
  trust: 'untrusted-tool-output' | 'gatehouse';
  truncated?: true;
}

/**
 * Redacts and bounds `data` (strings ≤ {@link MAX_STRING_CHARS}, arrays and objects ≤
 * {@link MAX_ITEMS} items or keys, whole output ≤ {@link MAX_OUTPUT_BYTES} bytes, with
 * {@link TRUNCATION_MARKER} where cut: see `boundValue`) and labels it
 * `{source: tool, trust}`. Outcomes Gatehouse itself produced (denials, validation results) are
 * labelled `trust: "gatehouse"`. Values under a `sensitive` key (the tool contract's list) are
 * always replaced by `[redacted]`.
 */
export function toSafeOutput(
  source: string,
  data: Record<string, unknown>,
  trust: SafeOutput['trust'] = 'untrusted-tool-output',
  sensitive: readonly string[] = [],
): SafeOutput {
  const bounded = boundValue(data, 0, new Set(sensitive)) as Record<string, unknown>;
  // Labels last: a tool's own data can never relabel itself as trusted.
  const out: SafeOutput = { ...bounded, source, trust };
  let text = JSON.stringify(out);
  if (Buffer.byteLength(text) <= MAX_OUTPUT_BYTES) return out;
  // Too large: keep the label and a cut, still-valid JSON preview of the data.
  // The limit is checked on the final serialization, since JSON escaping can grow the preview.
  text = redactSecrets(JSON.stringify(bounded));
  let preview = cutAt(text, MAX_OUTPUT_BYTES);
  let cut: SafeOutput = { source, trust, truncated: true, preview: preview + TRUNCATION_MARKER };
  while (Buffer.byteLength(JSON.stringify(cut)) > MAX_OUTPUT_BYTES) {
    preview = cutAt(preview, Math.floor(preview.length * 0.9));
    cut = { source, trust, truncated: true, preview: preview + TRUNCATION_MARKER };
  }
  return cut;
}
