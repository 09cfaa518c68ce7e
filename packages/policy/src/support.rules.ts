import type { ChangeRuleId, SupportBundle, SupportRuleId } from './bundle.ts';

/** Outcome of a policy evaluation. The default is deny; every decision names its rule. */
export interface PolicyDecision {
  decision: 'ALLOW' | 'DENY' | 'REQUIRE_APPROVAL';
  /** Rule that decided (`ALL` when every check passed). */
  ruleId: SupportRuleId | ChangeRuleId | 'ALL';
  policyRevision: string;
  /** Full reason for the decision log (not for the model). */
  reason: string;
}

/** Authoritative facts the gateway loads, tenant-scoped, before deciding. Money in cents. */
export interface SupportFacts {
  /** The authenticated user, or null when unknown (R0). */
  user: { id: string; tenant: string; region: string | null; scopes: string[] } | null;
  /** Tools granted to the agent. */
  agentGrantedTools: string[];
  /** Tools eligible in this workflow's state and mode. */
  eligibleTools: string[];
  tool: { name: string; scope: string };
  /** Normalized arguments (`amountCents` for refunds). */
  args: Record<string, string | number | null>;
  /** The order as the order system holds it, or null when not found. */
  order: { id: string; tenant: string; region: string; paid: number; status: string } | null;
  /** Refunds recorded on the order: succeeded, running (started) or failed_unknown. */
  priorRefundsOnOrderCents: number;
  /** The user's refunds over the rolling 24 h (same basis). */
  userRefunds24hCents: number;
  /** The agent's refunds for this tenant over the last hour (same basis). */
  agentRefunds1hCents: number;
  /** Every refund of the tenant over the rolling 24 h, any user (same basis; R10). */
  tenantRefunds24hCents: number;
  /** The tenant's own daily cap from the directory (world.json `refundCap24hCents`), or null: the bundle's applies (R10). */
  tenantRefundCap24hCents: number | null;
}

type Check = (f: SupportFacts, b: SupportBundle) => Omit<PolicyDecision, 'policyRevision' | 'ruleId'> | null;

const deny = (reason: string) => ({ decision: 'DENY' as const, reason });
const approve = (reason: string) => ({ decision: 'REQUIRE_APPROVAL' as const, reason });
const amountOf = (f: SupportFacts): number => Number(f.args.amountCents ?? 0);
const isRefund = (f: SupportFacts): boolean => f.tool.name === 'issue_refund';

/**
 * The daily refund cap R10 applies to the facts' tenant, integer cents: the directory's
 * `refundCap24hCents` when it is below the bundle's `tenantRolling24hCents`, else the bundle's —
 * the gated bundle is the ceiling, the directory can only tighten it
 * (docs/decisions/0190-tenant-daily-refund-cap.md). Undefined when the bundle has no cap (support-p1).
 */
export function tenantDailyCapCents(f: Pick<SupportFacts, 'tenantRefundCap24hCents'>, b: SupportBundle): number | undefined {
  const ceiling = b.limits.tenantRolling24hCents;
  if (ceiling === undefined) return undefined;
  return f.tenantRefundCap24hCents === null ? ceiling : Math.min(ceiling, f.tenantRefundCap24hCents);
}

/** The checks of docs/product/policy-rules.md#support-rules, keyed by rule id. Each returns null when it passes. */
export const supportRules: Record<SupportRuleId, Check> = {
  R0: (f) => (f.user ? null : deny('authenticated user is unknown')),
  R1: (f) => {
    if (!f.agentGrantedTools.includes(f.tool.name)) return deny(`tool ${f.tool.name} is not granted to the agent`);
    if (!f.eligibleTools.includes(f.tool.name)) return deny(`tool ${f.tool.name} is not eligible in this workflow's state or mode`);
    if (!f.user?.scopes.includes(f.tool.scope)) return deny(`user has not delegated scope ${f.tool.scope}`);
    return null;
  },
  R2: (f) => {
    if (!f.order || f.order.tenant !== f.user?.tenant) return deny('order not found in the user tenant');
    if (f.user.region && f.order.region !== f.user.region) return deny('order is outside the user region');
    return null;
  },
  R3: (f, b) => {
    if (!isRefund(f)) return null;
    const a = amountOf(f);
    if (a <= 0) return deny('refund amount must be positive');
    if (a > b.limits.maxRefundCents) return deny(`refund ${a} above maximum ${b.limits.maxRefundCents}`);
    return null;
  },
  R4: (f) =>
    isRefund(f) && f.order && f.priorRefundsOnOrderCents + amountOf(f) > f.order.paid
      ? deny(`prior refunds ${f.priorRefundsOnOrderCents} + ${amountOf(f)} exceed paid ${f.order.paid}`)
      : null,
  R5: (f, b) =>
    isRefund(f) && f.userRefunds24hCents + amountOf(f) > b.limits.userRolling24hCents
      ? deny(`user 24h refunds ${f.userRefunds24hCents} + ${amountOf(f)} exceed ${b.limits.userRolling24hCents}`)
      : null,
  R6: (f, b) =>
    isRefund(f) && f.agentRefunds1hCents + amountOf(f) > b.limits.agentRolling1hCents
      ? deny(`agent 1h refunds ${f.agentRefunds1hCents} + ${amountOf(f)} exceed ${b.limits.agentRolling1hCents}`)
      : null,
  R7: (f, b) =>
    isRefund(f) && f.priorRefundsOnOrderCents + amountOf(f) > b.limits.autoApproveLimitCents
      ? approve(`cumulative refunds ${f.priorRefundsOnOrderCents} + ${amountOf(f)} exceed auto limit ${b.limits.autoApproveLimitCents}`)
      : null,
  R10: (f, b) => {
    const cap = tenantDailyCapCents(f, b);
    return isRefund(f) && cap !== undefined && f.tenantRefunds24hCents + amountOf(f) > cap
      ? deny(`tenant 24h refunds ${f.tenantRefunds24hCents} + ${amountOf(f)} exceed the tenant's daily cap ${cap}`)
      : null;
  },
  R8: (f) => (f.tool.name === 'reship_order' && f.order?.status !== 'shipped' ? deny('order is not shipped') : null),
  R9: (f, b) =>
    f.tool.name === 'reship_order' && (f.order?.paid ?? 0) > b.limits.reshipApprovalPaidAboveCents
      ? approve(`order paid ${f.order?.paid} above ${b.limits.reshipApprovalPaidAboveCents}`)
      : null,
};

/**
 * Evaluates the support rules in the bundle's order; the first that fails decides
 * (docs/product/policy-rules.md#support-rules).
 * Pure: all facts are passed in.
 */
export function evaluateSupport(facts: SupportFacts, bundle: SupportBundle): PolicyDecision {
  for (const id of bundle.ruleOrder) {
    const outcome = supportRules[id](facts, bundle);
    if (outcome) return { ...outcome, ruleId: id, policyRevision: bundle.revision };
  }
  return { decision: 'ALLOW', ruleId: 'ALL', reason: 'all checks passed', policyRevision: bundle.revision };
}
