import type { ChangeBundle, ChangeRuleId } from './bundle.ts';
import type { PolicyDecision } from './support.rules.ts';

/** A change record as the staging change service holds it (`GET /changes/:id`). */
export interface ChangeRecordFacts {
  id: string;
  tenant: string;
  environment: string;
  service: string;
  risk: string;
}

/** A draft plan `prepare_change` wrote to the ledger (`change_plans`) in this workflow. */
export interface PlanFacts {
  id: string;
  changeId: string;
  window: string;
  note: string | null;
}

/** Authoritative facts the gateway loads, tenant-scoped, before deciding a change-pack proposal. */
export interface ChangeFacts {
  /** The authenticated user, or null when unknown (C0). */
  user: { id: string; tenant: string; region: string | null; scopes: string[] } | null;
  agentGrantedTools: string[];
  /** Tools eligible in the state the call was offered in, and the ticket's mode. */
  eligibleTools: string[];
  tool: { name: string; scope: string };
  /** Normalized arguments. */
  args: Record<string, string | number | null>;
  /** The change the call targets (for `schedule_change`: the plan's change), or null when not found. */
  change: ChangeRecordFacts | null;
  /** `schedule_change` only: the plan named by `planId` if this workflow prepared it, else null. */
  plan: PlanFacts | null;
  /**
   * The change's schedule that already holds it in this workflow (a `schedule_change` of one of
   * its plans, live or finished: ledger `SCHEDULE_HOLDING_STATUSES`), other than the action being
   * re-evaluated; null when none (C2, ADR 0694). Absent is read as none.
   */
  scheduled?: ScheduleFacts | null;
}

/** A `schedule_change` action of this workflow that holds its change as scheduled. */
export interface ScheduleFacts {
  planId: string;
  /** The action's status (`pending_approval` … `failed_unknown`). */
  status: string;
  /** The operation key the change service holds (or would hold) it under. */
  operationKey: string;
}

type Check = (f: ChangeFacts, b: ChangeBundle) => Omit<PolicyDecision, 'policyRevision' | 'ruleId'> | null;

const deny = (reason: string) => ({ decision: 'DENY' as const, reason });
const isSchedule = (f: ChangeFacts): boolean => f.tool.name === 'schedule_change';

/** C2's reason for a change this workflow already scheduled: names the schedule that holds it (bounded: ids only). */
const alreadyScheduled = (s: ScheduleFacts): string =>
  `the change already has a schedule in this workflow (plan ${s.planId}, ${s.status}, operation ${s.operationKey}); ` +
  'it is not scheduled twice: cancel it before its window (cancel-before-start) to schedule it again';

/** The checks of the change pack (policy `change-c1`), keyed by rule id. Each returns null when it passes. */
export const changeRules: Record<ChangeRuleId, Check> = {
  C0: (f) => (f.user ? null : deny('authenticated user is unknown')),
  C1: (f) => {
    if (!f.agentGrantedTools.includes(f.tool.name)) return deny(`tool ${f.tool.name} is not granted to the agent`);
    if (!f.eligibleTools.includes(f.tool.name)) return deny(`tool ${f.tool.name} is not eligible in this workflow's state or mode`);
    if (!f.user?.scopes.includes(f.tool.scope)) return deny(`user has not delegated scope ${f.tool.scope}`);
    return null;
  },
  C2: (f) => {
    if (isSchedule(f) && !f.plan) return deny('no plan with this id was prepared in this workflow');
    if (f.scheduled) return deny(alreadyScheduled(f.scheduled));
    if (!f.change || f.change.tenant !== f.user?.tenant) return deny('change not found in the user tenant');
    return null;
  },
  C3: (f, b) =>
    f.change && !b.limits.environments.includes(f.change.environment)
      ? deny(`environment ${f.change.environment} is not one this pack may change`)
      : null,
  C4: (f) =>
    isSchedule(f) && f.plan && (f.args.window !== f.plan.window || (f.args.note ?? null) !== f.plan.note)
      ? deny('the schedule differs from the prepared plan (window or note)')
      : null,
  C5: (f) =>
    isSchedule(f) ? { decision: 'REQUIRE_APPROVAL' as const, reason: 'scheduling a change needs a change owner approval' } : null,
};

/**
 * Evaluates the change rules in the bundle's order; the first that fails decides; every
 * decision names its rule and the policy revision. Pure: all facts are passed in.
 */
export function evaluateChange(facts: ChangeFacts, bundle: ChangeBundle): PolicyDecision {
  for (const id of bundle.ruleOrder) {
    const outcome = changeRules[id](facts, bundle);
    if (outcome) return { ...outcome, ruleId: id, policyRevision: bundle.revision };
  }
  return { decision: 'ALLOW', ruleId: 'ALL', reason: 'all checks passed', policyRevision: bundle.revision };
}
