import { argId, parseJsonObject, type HistoryCall } from './history.ts';
import type { Target } from './request-analysis.ts';

/** Text the planner answers with when the request names no order or change id. */
export const ASK_FOR_ORDER_ID =
  'I could not find an order id in your request. Please share the order id (for example O-1234) so I can help.';

/** Only short identifier-like values of tool outputs are repeated; never free text. */
const ID_LIKE = /^[A-Za-z0-9_.:-]{1,40}$/;

function idLike(v: unknown): string | null {
  return typeof v === 'string' && ID_LIKE.test(v) ? v : null;
}

/**
 * A short note on a tool output: `(not executed: superseded)` when `executed` is false,
 * `(<status>)` for an id-like `status`, `(failed)` when an `error` field is present, else "".
 */
export function outcomeNote(output: string | null): string {
  if (output === null) return ' (no output)';
  const o = parseJsonObject(output);
  if (o === null) return '';
  if (o.executed === false) {
    const reason = idLike(o.reason) ?? idLike(o.status);
    return reason ? ` (not executed: ${reason})` : ' (not executed)';
  }
  const status = idLike(o.status) ?? idLike(o.decision);
  if (status) return ` (${status})`;
  if (o.error !== undefined && o.error !== null) return ' (failed)';
  return '';
}

function str(v: unknown): string {
  return typeof v === 'string' || typeof v === 'number' ? String(v) : '?';
}

/** One clause describing a call of the history, built from its arguments and output. */
export function describeCall(c: HistoryCall): string {
  const order = argId(c, 'orderId') ?? '?';
  const change = argId(c, 'changeId') ?? '?';
  const base = ((): string => {
    if (c.args === null) return `${c.name} called with unreadable arguments`;
    switch (c.name) {
      case 'lookup_order':
        return `looked up ${order}`;
      case 'issue_refund':
        return `refund of ${str(c.args.amount)} on ${order} proposed`;
      case 'reship_order':
        return `reship of ${order} proposed`;
      case 'notify_customer':
        return `${str(c.args.template)} email for ${order} proposed`;
      case 'lookup_change':
        return `looked up ${change}`;
      case 'prepare_change':
        return `plan for ${change} prepared`;
      case 'schedule_change':
        return `scheduling of ${str(c.args.planId)} proposed`;
      default:
        return `${c.name} called`;
    }
  })();
  return base + outcomeNote(c.output);
}

/**
 * The planner's closing assistant message: one clause per call of the history (in order) plus
 * the notes on requested steps that could not be proposed, e.g.
 * "Looked up O-1002; refund of 120.00 on O-1002 proposed; reship of O-1002 proposed."
 */
export function composeFinalMessage(targets: readonly Target[], calls: readonly HistoryCall[], notes: readonly string[]): string {
  if (targets.length === 0) return ASK_FOR_ORDER_ID;
  const clauses = [...calls.map(describeCall), ...notes];
  if (clauses.length === 0) {
    return `I could not act on ${targets.map((t) => t.id).join(', ')}: no suitable tool was offered.`;
  }
  const text = clauses.join('; ');
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}.`;
}
