import { releaseWritesEnabled, SCHEDULE_HOLDING_STATUSES, type DecisionContext, type Db, type Trx } from '@gatehouse/ledger';
import { loadWorld } from '@gatehouse/contracts';
import { toolsOfPack, type ParsedProposal, type Pack } from '@gatehouse/tools';
import type { PolicyBundles } from './bundle.ts';
import { evaluateChange, type ChangeFacts, type ChangeRecordFacts, type PlanFacts, type ScheduleFacts } from './change.rules.ts';
import { eligibleTools, toolOfferedIn } from './eligibility.ts';
import {
  fetchOrder,
  loadSupportFacts,
  lookupUser,
  ridingSupportSums,
  type RefundSums,
  type RidingRefundSums,
  type SupportLimitOptions,
} from './facts.ts';
import { evaluateSupport, type PolicyDecision, type SupportFacts } from './support.rules.ts';
import { changeRecord, readRecordJson } from './records.ts';

/**
 * The authoritative record a decision reads, by pack: the order (support) or the change and,
 * for `schedule_change`, the plan this workflow prepared (change). Read before the deciding
 * transaction; never taken from the model's arguments beyond the id it names.
 */
export type AuthoritativeRecord =
  { pack: 'support'; order: SupportFacts['order'] } | { pack: 'change'; change: ChangeRecordFacts | null; plan: PlanFacts | null };

/**
 * Reads a change from the change service (`GET /changes/:id` of the staging systems): an
 * authoritative read for policy, no credential minted; the caller checks the tenant (C2). Null
 * when there is no such change. The record is validated and its strings bounded and redacted
 * ({@link changeRecord}).
 * @throws DependencyUnavailable(`system_of_record`) when the change service does not answer or
 *   answers 408/429/5xx (the step is held, {@link readRecordJson}); MalformedRecord, or Error for
 *   another bad answer (the job is retried).
 */
export async function fetchChange(stagingUrl: string, changeId: string): Promise<ChangeRecordFacts | null> {
  const body = await readRecordJson(`${stagingUrl}/changes/${encodeURIComponent(changeId)}`, 'change service');
  return body === null ? null : changeRecord(body);
}

/** The plan `planId` if `prepare_change` wrote it in workflow `workflowId`, else null. */
export async function findPlan(db: Db | Trx, workflowId: string, planId: string): Promise<PlanFacts | null> {
  const p = await db
    .selectFrom('change_plans')
    .select(['id', 'change_id', 'window', 'note'])
    .where('id', '=', planId)
    .where('workflow_id', '=', workflowId)
    .executeTakeFirst();
  return p ? { id: p.id, changeId: p.change_id, window: p.window, note: p.note } : null;
}

/**
 * The `schedule_change` of workflow `workflowId` that holds change `changeId` as scheduled (one of
 * its plans, status in `SCHEDULE_HOLDING_STATUSES`), other than action `excludeActionId` (the one
 * being re-evaluated); the earliest, or null. Read in the deciding transaction, after the
 * workflow's lock, so two proposals of one run see each other (C2, ADR 0694).
 */
export async function findHoldingSchedule(
  trx: Db | Trx,
  workflowId: string,
  changeId: string,
  excludeActionId?: string,
): Promise<ScheduleFacts | null> {
  let q = trx
    .selectFrom('actions as a')
    .innerJoin('change_plans as p', (j) => j.onRef('p.id', '=', 'a.target').onRef('p.workflow_id', '=', 'a.workflow_id'))
    .select(['a.target', 'a.status', 'a.operation_key'])
    .where('a.workflow_id', '=', workflowId)
    .where('a.tool', '=', 'schedule_change')
    .where('a.status', 'in', [...SCHEDULE_HOLDING_STATUSES])
    .where('p.change_id', '=', changeId);
  if (excludeActionId) q = q.where('a.id', '!=', excludeActionId);
  const r = await q.orderBy('a.created_at').limit(1).executeTakeFirst();
  return r ? { planId: r.target, status: r.status, operationKey: r.operation_key } : null;
}

/** The change a change-pack proposal would prepare or schedule (null for a read, or an unknown plan). */
function changeToBeScheduled(parsed: Pick<ParsedProposal, 'tool' | 'args'>, plan: PlanFacts | null): string | null {
  if (parsed.tool.name === 'schedule_change') return plan?.changeId ?? null;
  return parsed.tool.name === 'prepare_change' ? String(parsed.args.changeId) : null;
}

/**
 * Reads the {@link AuthoritativeRecord} for one parsed proposal of workflow `wf`. Nothing is read
 * for an unknown user, for a tool outside the workflow's pack, or — when the caller names the
 * state the tools were offered in (`offeredInState`, the gateway) — for a state-gated tool not
 * offered in that state (C1/R1 deny those first, with no call to a system of record).
 * @throws Error when a system of record does not answer.
 */
export async function readAuthoritative(
  db: Db,
  stagingUrl: string,
  wf: { id: string; pack: Pack; user_id: string; tenant: string; offeredInState?: string | null },
  parsed: Pick<ParsedProposal, 'tool' | 'args'>,
): Promise<AuthoritativeRecord> {
  const offered = !wf.offeredInState || toolOfferedIn(parsed.tool, wf.offeredInState);
  const known = lookupUser(wf.user_id, wf.tenant) !== null && parsed.tool.pack === wf.pack && offered;
  if (wf.pack === 'support') return { pack: 'support', order: known ? await fetchOrder(stagingUrl, String(parsed.args.orderId)) : null };
  if (!known) return { pack: 'change', change: null, plan: null };
  if (parsed.tool.name === 'schedule_change') {
    const plan = await findPlan(db, wf.id, String(parsed.args.planId));
    return { pack: 'change', plan, change: plan ? await fetchChange(stagingUrl, plan.changeId) : null };
  }
  return { pack: 'change', change: await fetchChange(stagingUrl, String(parsed.args.changeId)), plan: null };
}

/** The workflow fields a decision reads. */
export interface DecidingWorkflow {
  id: string;
  release_id: string;
  pack: Pack;
  tenant: string;
  user_id: string;
  mode: 'investigate' | 'act';
  state: string;
}

/** Outcome of {@link evaluateAction}: the decision and the facts snapshot stored with the action. */
export interface Evaluation {
  decision: PolicyDecision;
  /** Authoritative facts the rule used, as shown to approvers (money in cents). */
  snapshot: Record<string, unknown>;
}

/**
 * The state a proposal's tools were offered in (recorded by the agent loop with the proposal):
 * state-gated tools (docs/product/users-and-tools.md#change-pack) are judged against it, not against where the
 * workflow has moved since. Falls back to the workflow's current state.
 */
async function offeredInState(trx: Trx, proposalId: string, current: string): Promise<string> {
  const p = await trx.selectFrom('proposals').select('offered_in_state').where('id', '=', proposalId).executeTakeFirst();
  return p?.offered_in_state ?? current;
}

/** How {@link evaluateAction} reads a support decision's limits, from its input. */
function supportLimitOptions(input: { bundles: PolicyBundles; excludeActionId?: string; atExecution?: boolean }): SupportLimitOptions {
  return {
    excludeActionId: input.excludeActionId,
    atExecution: input.atExecution,
    tenantCap: input.bundles.support.ruleOrder.includes('R10'),
  };
}

/**
 * The limit locks and sums {@link evaluateAction} would take for `input`, as a read that rides on
 * another statement of the caller's transaction ({@link ridingSupportSums}): the executor's claim
 * reads them with its grant, then passes the parsed sums as `lockedSums`
 * (docs/decisions/0620-the-claim-in-two-statements.md). Null when the decision reads no refund
 * sums (another tool, another pack, an order outside the tenant).
 */
export function ridingLimitSums(input: {
  wf: Pick<DecidingWorkflow, 'tenant' | 'user_id'>;
  parsed: Pick<ParsedProposal, 'tool' | 'args'>;
  record: AuthoritativeRecord;
  bundles: PolicyBundles;
  excludeActionId?: string;
  atExecution?: boolean;
}): RidingRefundSums | null {
  if (input.record.pack !== 'support') return null;
  return ridingSupportSums(input.wf, input.parsed, input.record.order, supportLimitOptions(input));
}

/**
 * Loads the facts of the workflow's pack inside `trx` and evaluates its active bundle: docs/product/policy-rules.md
 * R0–R10 for support (cumulative basis under the refund limit locks), change-c1 C0–C5 for
 * change. `atExecution` is the executor's re-evaluation (queued refunds do not count there).
 */
export async function evaluateAction(
  trx: Trx,
  input: {
    wf: DecidingWorkflow;
    proposalId: string;
    parsed: Pick<ParsedProposal, 'tool' | 'args'>;
    record: AuthoritativeRecord;
    bundles: PolicyBundles;
    excludeActionId?: string;
    atExecution?: boolean;
    /** Read with the workflow's lock ({@link lockWorkflowForDecision}); read here when absent. */
    context?: Pick<DecisionContext, 'offeredInState' | 'writesEnabled'>;
    /**
     * Refund sums read beforehand without the limit locks ({@link unlockedRefundSums}): decided on
     * as they are, no lock taken — the caller confirms under the locks before it commits (ADR 0450).
     */
    unlockedSums?: RefundSums;
    /** Refund sums the caller read under the limit locks in `trx` ({@link ridingLimitSums}, ADR 0620): no lock taken here. */
    lockedSums?: RefundSums;
  },
): Promise<Evaluation> {
  const { wf, parsed, record, context } = input;
  const state = context ? (context.offeredInState ?? wf.state) : await offeredInState(trx, input.proposalId, wf.state);
  // A candidate release before `enable-writes` (or one rolled back): no consequential tool is eligible.
  const writesEnabled = context ? context.writesEnabled : await releaseWritesEnabled(trx, wf.release_id);
  if (record.pack === 'support') {
    const facts = await loadSupportFacts(trx, { ...wf, state, writesEnabled }, parsed, record.order, {
      ...supportLimitOptions(input),
      unlockedSums: input.unlockedSums,
      lockedSums: input.lockedSums,
    });
    const inTenant = facts.order && facts.user && facts.order.tenant === facts.user.tenant ? facts.order : null;
    return {
      decision: evaluateSupport(facts, input.bundles.support),
      snapshot: {
        orderPaidCents: inTenant?.paid ?? null,
        orderStatus: inTenant?.status ?? null,
        orderRegion: inTenant?.region ?? null,
        priorRefundsOnOrderCents: facts.priorRefundsOnOrderCents,
        requesterRegion: facts.user?.region ?? null,
      },
    };
  }
  const world = loadWorld();
  const user = lookupUser(wf.user_id, wf.tenant);
  const changeId = changeToBeScheduled(parsed, record.plan);
  const facts: ChangeFacts = {
    user,
    agentGrantedTools: world.agent.grantedTools,
    eligibleTools: eligibleTools(toolsOfPack('change'), { mode: wf.mode, state, writesEnabled }, world.agent.grantedTools).map(
      (t) => t.name,
    ),
    tool: { name: parsed.tool.name, scope: parsed.tool.scope },
    args: parsed.args,
    change: record.change,
    plan: record.plan,
    scheduled: changeId ? await findHoldingSchedule(trx, wf.id, changeId, input.excludeActionId) : null,
  };
  const inTenant = record.change && user && record.change.tenant === user.tenant ? record.change : null;
  return {
    decision: evaluateChange(facts, input.bundles.change),
    snapshot: {
      changeId: inTenant?.id ?? null,
      service: inTenant?.service ?? null,
      environment: inTenant?.environment ?? null,
      risk: inTenant?.risk ?? null,
      planId: record.plan?.id ?? null,
      planWindow: record.plan?.window ?? null,
      ...(parsed.tool.name === 'schedule_change' ? { effect: 'remote-write', rollback: 'cancel-before-start', singleUse: true } : {}),
      requesterRegion: user?.region ?? null,
    },
  };
}

/**
 * The amount an approval of an action is granted for, integer cents (docs/product/policy-rules.md#approvals:
 * the approver's approve limit must cover it): a refund's own amount (`args.amountCents`), else
 * for the support pack the order's paid amount in the decision's facts (`orderPaidCents`, a
 * reship); null for the change pack, or when the facts do not say. The approval service writes
 * it on the approval; the executor compares it with the amount the re-evaluation finds.
 */
export function approvalAmountCents(pack: string, args: Record<string, unknown>, facts: { orderPaidCents?: number | null }): number | null {
  if (pack === 'change') return null;
  if (typeof args.amountCents === 'number') return args.amountCents;
  return typeof facts.orderPaidCents === 'number' ? facts.orderPaidCents : null;
}
