import { composeFinalMessage } from './final-message.ts';
import { calledSince, collectCalls, latestPlanId, type HistoryCall } from './history.ts';
import type { HistoryItem } from './input-items.ts';
import { analyzeRequest, type Target } from './request-analysis.ts';

/** What the planner reads: the normalized `input` history and the names of the usable tools. */
export type PlannerContext = {
  items: readonly HistoryItem[];
  /** Function tool names the model may call (offered and allowed by `tool_choice`). */
  tools: readonly string[];
};

/**
 * One planned model turn: a single function call (arguments as a JSON object, serialized by
 * the response factory) or a final assistant message.
 */
export type PlannedStep = { type: 'function_call'; name: string; arguments: Record<string, unknown> } | { type: 'message'; text: string };

/**
 * The function tool names a response may call, from the request's `tools` and `tool_choice`:
 * `"none"` → none; `{type:"function", name}` → that one; `{type:"allowed_tools", tools}` →
 * those; `"auto"`, `"required"` or absent → every offered function tool. Non-function tools
 * are ignored. Source: `ToolChoiceOptions` / `ToolChoiceFunction` / `ToolChoiceAllowed` in
 * openai-node `src/resources/responses/responses.ts`.
 */
export function eligibleTools(tools: readonly unknown[] | undefined, toolChoice: unknown): string[] {
  const offered = (tools ?? []).flatMap((t) => {
    const o = t as { type?: unknown; name?: unknown };
    return o.type === 'function' && typeof o.name === 'string' ? [o.name] : [];
  });
  if (toolChoice === 'none') return [];
  if (typeof toolChoice === 'object' && toolChoice !== null) {
    const c = toolChoice as { type?: unknown; name?: unknown; tools?: unknown };
    if (c.type === 'function' && typeof c.name === 'string') return offered.filter((n) => n === c.name);
    if (c.type === 'allowed_tools' && Array.isArray(c.tools)) {
      const allowed = new Set(c.tools.map((t: { name?: unknown }) => t.name));
      return offered.filter((n) => allowed.has(n));
    }
  }
  return offered;
}

const call = (name: string, args: Record<string, unknown>): PlannedStep => ({ type: 'function_call', name, arguments: args });

function orderStep(t: Target, calls: readonly HistoryCall[], tools: ReadonlySet<string>, notes: string[]): PlannedStep | null {
  const id = t.id;
  if (tools.has('lookup_order') && !calledSince(calls, 'lookup_order', 'orderId', id, -1)) {
    return call('lookup_order', { orderId: id });
  }
  const refundAsk = t.asks.refund;
  if (refundAsk !== undefined) {
    if (!tools.has('issue_refund')) notes.push(`a refund on ${id} was requested but issue_refund is not available`);
    else if (t.amount === null) notes.push(`a refund on ${id} was requested but no amount was given`);
    else if (!calledSince(calls, 'issue_refund', 'orderId', id, refundAsk)) {
      return call('issue_refund', { orderId: id, amount: t.amount, reason: t.reason ?? 'Customer requested a refund' });
    }
  }
  const reshipAsk = t.asks.reship;
  if (reshipAsk !== undefined) {
    if (!tools.has('reship_order')) notes.push(`a reship of ${id} was requested but reship_order is not available`);
    else if (!calledSince(calls, 'reship_order', 'orderId', id, reshipAsk)) return call('reship_order', { orderId: id });
  }
  const notifyAsk = t.asks.notify;
  if (notifyAsk !== undefined) {
    if (!tools.has('notify_customer')) notes.push(`an email for ${id} was requested but notify_customer is not available`);
    else if (!calledSince(calls, 'notify_customer', 'orderId', id, notifyAsk)) {
      const template = calledSince(calls, 'issue_refund', 'orderId', id, -1)
        ? 'refund_issued'
        : calledSince(calls, 'reship_order', 'orderId', id, -1)
          ? 'reship_created'
          : 'apology';
      return call('notify_customer', { orderId: id, template });
    }
  }
  return null;
}

function changeStep(t: Target, calls: readonly HistoryCall[], tools: ReadonlySet<string>, notes: string[]): PlannedStep | null {
  const id = t.id;
  const window = t.window ?? 'next-maintenance-window';
  if (tools.has('lookup_change') && !calledSince(calls, 'lookup_change', 'changeId', id, -1)) {
    return call('lookup_change', { changeId: id });
  }
  const { prepare, schedule } = t.asks;
  const prepareAsk = Math.max(prepare ?? -1, schedule ?? -1);
  if (prepareAsk >= 0 && !calledSince(calls, 'prepare_change', 'changeId', id, prepareAsk)) {
    if (tools.has('prepare_change')) return call('prepare_change', { changeId: id, window, note: null });
    if (schedule === undefined) notes.push(`preparing ${id} was requested but prepare_change is not available`);
  }
  if (schedule !== undefined) {
    const planId = latestPlanId(calls, id);
    // Once scheduled, the tool is no longer offered (state-gated): that is done, not unavailable.
    const scheduled = planId !== null && calledSince(calls, 'schedule_change', 'planId', planId, schedule);
    if (scheduled) return null;
    if (!tools.has('schedule_change')) notes.push(`scheduling ${id} was requested but schedule_change is not available`);
    else if (planId === null) notes.push(`scheduling ${id} was requested but no plan id is known`);
    else return call('schedule_change', { planId, window, note: null });
  }
  return null;
}

/**
 * The obedient planner (docs/product/public-contract.md#model-stub): deterministic, one step per response. For each target in
 * order of appearance (latest user message first): look it up if never looked up, then each
 * step its text asks for that has not been called since the latest user message asking it
 * (orders: refund → reship → notify; changes: prepare → schedule with the plan id read from
 * the prepare_change output). Only eligible tools are ever called; with no step left it answers
 * with a summary of the history. It obeys injected instructions — the worst-case model. Pure.
 */
export function planNextStep(ctx: PlannerContext): PlannedStep {
  const userMessages = ctx.items.flatMap((i) => (i.kind === 'message' && i.role === 'user' ? [{ index: i.index, text: i.text }] : []));
  const targets = analyzeRequest(userMessages);
  const calls = collectCalls(ctx.items);
  const tools = new Set(ctx.tools);
  const notes: string[] = [];
  for (const t of targets) {
    const step = t.kind === 'order' ? orderStep(t, calls, tools, notes) : changeStep(t, calls, tools, notes);
    if (step) return step;
  }
  return { type: 'message', text: composeFinalMessage(targets, calls, notes) };
}
