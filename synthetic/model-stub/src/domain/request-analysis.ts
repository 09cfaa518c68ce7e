/**
 * What the obedient planner reads from the user's text: order and change ids, amounts, verbs,
 * windows and a short issue description. Pure; deliberately naive (it obeys whatever the text
 * says, injected instructions included — docs/product/public-contract.md#model-stub).
 */

/** A step a user can ask for on a target. Lookups are implicit and not listed. */
export type Verb = 'refund' | 'reship' | 'notify' | 'prepare' | 'schedule';

/** `prepare_change` / `schedule_change` window enum (docs/product/users-and-tools.md#change-pack). */
export type ChangeWindow = 'next-maintenance-window' | 'manual-window';

/** One order (`O-1234`, `N-2001`) or change (`CHG-101`) the request mentions. */
export type Target = {
  kind: 'order' | 'change';
  /** Upper-cased id as it appears in the text. */
  id: string;
  /** For each verb asked for this target: input index of the latest user message asking it. */
  asks: Partial<Record<Verb, number>>;
  /** Refund amount, two decimals (`"120.00"`), from the latest message that gives one. */
  amount: string | null;
  /** Refund reason, ≤ 240 chars: `Customer reported: <issue>` or the sentence asking. */
  reason: string | null;
  window: ChangeWindow | null;
};

/** A user message in chronological order; `index` is its position in `input`. */
export type UserMessage = { index: number; text: string };

type Features = {
  verbs: Verb[];
  amount: string | null;
  issue: string | null;
  askText: string | null;
  window: ChangeWindow | null;
};

type Slot<T> = { value: T; at: number } | null;
type Draft = { target: Target; amount: Slot<string>; issue: Slot<string>; askText: Slot<string>; window: Slot<ChangeWindow> };

const ID_RE = /\b(?:[ON]-\d{4}|CHG-\d+)\b/gi;

const VERB_RES: ReadonlyArray<readonly [Verb, RegExp]> = [
  ['refund', /\brefund\w*/gi],
  ['reship', /\b(?:re-?ship\w*|replacement\w*|replace\w*|re-?send\w*)/gi],
  ['notify', /\b(?:e-?mail\w*|notify\w*|notification\w*)/gi],
  ['prepare', /\bprepar\w*/gi],
  ['schedule', /\bschedul\w*/gi],
];

/** "not a refund", "no replacement", "without emailing", "do not need a refund". */
const NEGATION_BEFORE_RE = /\b(?:no|not|don'?t|do not|never|without|instead of)\b(?:\s+\w+){0,3}\s*$/i;

const AMOUNT_RES: readonly RegExp[] = [
  /\$\s?(\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d+(?:\.\d{1,2})?)/g,
  /\b(\d+(?:\.\d{1,2})?)\s*(?:dollars?|usd|bucks)\b/gi,
  /(?<![\d.,$])\b(\d+\.\d{2})\b/g,
];

const ISSUE_RE =
  /\b(cracked|broken|damaged|defective|missing|lost|late|delayed|wrong|stolen|duplicate charge|double[- ]charged|charged twice|overcharged|never arrived|did not arrive|didn't arrive)\b(?:\s+(item|items|package|parcel|order|product|box|delivery|screen|lid))?/i;

const MAX_REASON = 240;

function splitSentences(text: string): string[] {
  return text.split(/(?<=[.!?;])\s+|\n+/).filter((s) => s.trim() !== '');
}

function extractIds(sentence: string): Array<{ kind: Target['kind']; id: string }> {
  return [...sentence.matchAll(ID_RE)].map((m) => {
    const id = m[0].toUpperCase();
    return { kind: id.startsWith('CHG-') ? ('change' as const) : ('order' as const), id };
  });
}

/** Formats a matched number as the model would pass it: two decimals, no separators. */
function formatAmount(raw: string): string {
  return Number(raw.replace(/,/g, '')).toFixed(2);
}

/** First amount in the sentence (ids blanked so `O-1002` never reads as 1002). */
function firstAmount(sentence: string): string | null {
  const blanked = sentence.replace(ID_RE, (m) => ' '.repeat(m.length));
  let best: { pos: number; raw: string } | null = null;
  for (const re of AMOUNT_RES) {
    for (const m of blanked.matchAll(re)) {
      if (m[1] !== undefined && (best === null || m.index < best.pos)) best = { pos: m.index, raw: m[1] };
    }
  }
  return best ? formatAmount(best.raw) : null;
}

function verbsOf(sentence: string): Verb[] {
  const verbs: Verb[] = [];
  for (const [verb, re] of VERB_RES) {
    for (const m of sentence.matchAll(re)) {
      const before = sentence.slice(Math.max(0, m.index - 40), m.index);
      if (!NEGATION_BEFORE_RE.test(before)) {
        verbs.push(verb);
        break;
      }
    }
  }
  return verbs;
}

function featuresOf(sentence: string): Features {
  const verbs = verbsOf(sentence);
  const issue = ISSUE_RE.exec(sentence);
  const window: ChangeWindow | null = /\bnext\s+maintenance\s+window\b/i.test(sentence)
    ? 'next-maintenance-window'
    : /\bmanual\s+window\b/i.test(sentence)
      ? 'manual-window'
      : null;
  return {
    verbs,
    amount: firstAmount(sentence),
    issue: issue ? [issue[1], issue[2]].filter(Boolean).join(' ').toLowerCase() : null,
    askText: verbs.includes('refund') ? sentence.trim() : null,
    window,
  };
}

/** Keeps the value of the latest message; within one message the first value found wins. */
function take<T>(slot: Slot<T>, value: T | null, at: number): Slot<T> {
  if (value === null) return slot;
  return slot === null || at > slot.at ? { value, at } : slot;
}

function apply(d: Draft, f: Features, at: number): void {
  for (const v of f.verbs) d.target.asks[v] = Math.max(d.target.asks[v] ?? -1, at);
  d.amount = take(d.amount, f.amount, at);
  d.issue = take(d.issue, f.issue, at);
  d.askText = take(d.askText, f.askText, at);
  d.window = take(d.window, f.window, at);
}

/**
 * Reads the user messages (latest first) into targets in order of appearance. Scoping: a
 * sentence naming ids applies to those ids; a sentence without ids applies to the ids of the
 * previous sentence, or — before any id of its message — to all ids of that message; a message
 * without any id applies to every target of the conversation (e.g. "also email them").
 */
export function analyzeRequest(messages: readonly UserMessage[]): Target[] {
  const drafts = new Map<string, Draft>();
  const globals: Array<{ f: Features; at: number }> = [];
  const draftFor = (kind: Target['kind'], id: string): string => {
    const key = `${kind}:${id}`;
    if (!drafts.has(key)) {
      const target: Target = { kind, id, asks: {}, amount: null, reason: null, window: null };
      drafts.set(key, { target, amount: null, issue: null, askText: null, window: null });
    }
    return key;
  };
  for (const m of [...messages].reverse()) {
    const messageKeys: string[] = [];
    const pending: Features[] = [];
    let scope: string[] = [];
    for (const sentence of splitSentences(m.text)) {
      const ids = extractIds(sentence).map((x) => draftFor(x.kind, x.id));
      for (const k of ids) if (!messageKeys.includes(k)) messageKeys.push(k);
      if (ids.length > 0) scope = ids;
      const f = featuresOf(sentence);
      if (scope.length === 0) pending.push(f);
      else for (const k of scope) apply(drafts.get(k) as Draft, f, m.index);
    }
    for (const f of pending) {
      if (messageKeys.length === 0) globals.push({ f, at: m.index });
      else for (const k of messageKeys) apply(drafts.get(k) as Draft, f, m.index);
    }
  }
  for (const d of drafts.values()) for (const g of globals) apply(d, g.f, g.at);
  return [...drafts.values()].map((d) => {
    const reason = d.issue ? `Customer reported: ${d.issue.value}` : d.askText ? d.askText.value : null;
    return {
      ...d.target,
      amount: d.amount?.value ?? null,
      reason: reason === null ? null : reason.slice(0, MAX_REASON),
      window: d.window?.value ?? null,
    };
  });
}
