import { z } from 'zod';
import { canonicalChangeId, canonicalOrderId, canonicalText, MAX_FREE_TEXT_CHARS, noteOrNull, PLAN_ID, toCents } from './normalize.ts';

/** How a tool touches the world (docs/product/users-and-tools.md#effect-classes). */
export type EffectClass = 'sensitive_read' | 'remote_write_money' | 'remote_write' | 'external_send' | 'local_draft';

/** How failures may be retried (docs/product/users-and-tools.md#retry-classes). */
export type RetryClass = 'bounded_read' | 'idempotent_write' | 'at_most_once_readback' | 'at_most_once';

/**
 * Downstream system a tool's adapter calls, and the delegated-token audience for it. `drafts`
 * is Gatehouse's own ledger (`change_plans`): no external state, no credential.
 */
export type Downstream = 'orders' | 'payments' | 'mail' | 'changes' | 'drafts';

/** Tool packs (docs/product/users-and-tools.md#tool-packs): a workflow's pack fixes its catalog, policy bundle and budgets. */
export type Pack = 'support' | 'change';

/** Normalized arguments: JSON values only, nullable fields are `null`, amounts in cents. */
export type NormalizedArgs = Record<string, string | number | null>;

/**
 * A fixed tool of a pack. `args` is the single source of the contract: it yields the strict JSON
 * Schema sent to the Responses API and validates at run time (the runtime validator is the
 * authority; `maxLength` is unreliable in strict mode).
 */
export interface ToolDefinition {
  name: string;
  pack: Pack;
  /**
   * Workflow states in which the tool may be offered and accepted (docs/product/users-and-tools.md#change-pack:
   * "allowed in state"); absent means every live state.
   */
  states?: readonly string[];
  description: string;
  effectClass: EffectClass;
  retryClass: RetryClass;
  downstream: Downstream;
  /** Delegated scope a user must hold for this tool (docs/product/policy-rules.md#r1) and the token's `scope`. */
  scope: string;
  /** Whether the tool changes the world outside Gatehouse (audit-health gated at execution). */
  consequential: boolean;
  args: z.ZodObject;
  /** Turns validated arguments into the normalized action arguments. */
  normalize: (args: Record<string, unknown>) => NormalizedArgs;
  /** The object the action targets (the order id): one logical action per tool + target. */
  target: (args: NormalizedArgs) => string;
  /**
   * The fields of a successful result the next decision needs. Parsing projects the adapter's
   * result onto them (unknown keys are dropped); a result that does not parse is malformed.
   */
  output: z.ZodObject;
  /** Result fields the boundary always redacts, wherever they appear (personal data, secrets). */
  sensitive?: readonly string[];
}

const orderId = z.string().describe('Order id, e.g. O-1002');

/** The support pack (docs/product/users-and-tools.md#support-pack). */
export const supportTools: readonly ToolDefinition[] = [
  {
    name: 'lookup_order',
    pack: 'support',
    description: 'Look up an order: status, region, amount paid, refunds and shipments.',
    effectClass: 'sensitive_read',
    retryClass: 'bounded_read',
    downstream: 'orders',
    scope: 'orders:read',
    consequential: false,
    args: z.strictObject({ orderId }),
    normalize: (a) => ({ orderId: canonicalOrderId(a.orderId as string) }),
    target: (a) => String(a.orderId),
    output: z.object({
      orderId: z.string(),
      status: z.string(),
      region: z.string(),
      paid: z.string().describe('currency units'),
      refunded: z.string().describe('currency units'),
      shipments: z.number().int(),
    }),
  },
  {
    name: 'issue_refund',
    pack: 'support',
    description: 'Refund part or all of an order to the customer. Amount in currency units, e.g. "30.00".',
    effectClass: 'remote_write_money',
    retryClass: 'idempotent_write',
    downstream: 'payments',
    scope: 'refund:create',
    consequential: true,
    args: z.strictObject({
      orderId,
      amount: z.union([z.string(), z.number()]).describe('Amount in currency units, at most two decimals'),
      reason: z.string().max(MAX_FREE_TEXT_CHARS).describe('Short reason for the refund'),
    }),
    normalize: (a) => ({
      orderId: canonicalOrderId(a.orderId as string),
      amountCents: toCents(a.amount as string | number),
      reason: canonicalText(a.reason as string, 'reason'),
    }),
    target: (a) => String(a.orderId),
    output: z.object({ refundId: z.string(), orderId: z.string(), amountCents: z.number().int() }),
  },
  {
    name: 'reship_order',
    pack: 'support',
    description: 'Ship a replacement for an order that was shipped.',
    effectClass: 'remote_write',
    retryClass: 'at_most_once_readback',
    downstream: 'orders',
    scope: 'reship:create',
    consequential: true,
    args: z.strictObject({ orderId }),
    normalize: (a) => ({ orderId: canonicalOrderId(a.orderId as string) }),
    target: (a) => String(a.orderId),
    output: z.object({ orderId: z.string(), shipmentId: z.string().optional(), resolvedBy: z.literal('read_back').optional() }),
  },
  {
    name: 'notify_customer',
    pack: 'support',
    description: "Email the order's customer one of the fixed templates.",
    effectClass: 'external_send',
    retryClass: 'at_most_once',
    downstream: 'mail',
    scope: 'mail:send',
    consequential: true,
    args: z.strictObject({ orderId, template: z.enum(['refund_issued', 'reship_created', 'apology']) }),
    normalize: (a) => ({ orderId: canonicalOrderId(a.orderId as string), template: a.template as string }),
    target: (a) => String(a.orderId),
    output: z.object({ messageId: z.string(), template: z.string() }),
    sensitive: ['to', 'email', 'recipient'],
  },
];

const changeId = z.string().describe('Change id, e.g. CHG-101');
const changeWindow = z.enum(['next-maintenance-window', 'manual-window']).describe('When the change may run');
const changeNote = z.string().max(MAX_FREE_TEXT_CHARS).nullable().describe('Short note for the change owner, or null');

/**
 * The change pack (docs/product/users-and-tools.md#change-pack): look a change up, prepare a local draft plan, then schedule the plan
 * on the staging change service — the last only in `awaiting_approval` and only with a change
 * owner's approval of that exact plan.
 */
export const changeTools: readonly ToolDefinition[] = [
  {
    name: 'lookup_change',
    pack: 'change',
    states: ['received', 'investigating'],
    description: 'Look up a change request: service, environment, summary and risk.',
    effectClass: 'sensitive_read',
    retryClass: 'bounded_read',
    downstream: 'changes',
    scope: 'change:read',
    consequential: false,
    args: z.strictObject({ changeId }),
    normalize: (a) => ({ changeId: canonicalChangeId(a.changeId as string) }),
    target: (a) => String(a.changeId),
    output: z.object({ changeId: z.string(), environment: z.string(), service: z.string(), summary: z.string(), risk: z.string() }),
  },
  {
    name: 'prepare_change',
    pack: 'change',
    states: ['investigating'],
    description: 'Prepare a draft plan for a change (creates no external state). Returns the plan id to schedule.',
    effectClass: 'local_draft',
    retryClass: 'idempotent_write',
    downstream: 'drafts',
    scope: 'change:prepare',
    consequential: false,
    args: z.strictObject({ changeId, window: changeWindow, note: changeNote }),
    normalize: (a) => ({ changeId: canonicalChangeId(a.changeId as string), window: a.window as string, note: noteOrNull(a.note) }),
    target: (a) => String(a.changeId),
    output: z.object({ planId: z.string().regex(PLAN_ID), changeId: z.string(), window: z.string(), note: z.string().nullable() }),
  },
  {
    name: 'schedule_change',
    pack: 'change',
    states: ['awaiting_approval'],
    description: 'Schedule a prepared plan on the staging change service. Needs a change owner approval.',
    effectClass: 'remote_write',
    retryClass: 'idempotent_write',
    downstream: 'changes',
    scope: 'change:schedule',
    consequential: true,
    args: z.strictObject({
      planId: z.string().regex(PLAN_ID).describe('Plan id from prepare_change'),
      window: changeWindow,
      note: changeNote,
    }),
    normalize: (a) => ({ planId: (a.planId as string).trim(), window: a.window as string, note: noteOrNull(a.note) }),
    target: (a) => String(a.planId),
    output: z.object({ operationKey: z.string(), status: z.string(), planId: z.string(), changeId: z.string(), window: z.string() }),
  },
];

/** Every tool of every pack. Tool names are unique across packs. */
export const allTools: readonly ToolDefinition[] = [...supportTools, ...changeTools];

const byName = new Map(allTools.map((t) => [t.name, t]));

/** The tool called `name` (any pack), or `undefined` for an unknown tool. */
export function findTool(name: string): ToolDefinition | undefined {
  return byName.get(name);
}

/** The catalog of one pack (docs/product/users-and-tools.md#tool-packs). */
export function toolsOfPack(pack: Pack): readonly ToolDefinition[] {
  return pack === 'change' ? changeTools : supportTools;
}
