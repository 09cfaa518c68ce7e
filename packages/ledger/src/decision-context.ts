import { sql } from 'kysely';
import type { Trx } from './db.ts';
import { writesEnabledSql } from './releases.ts';
import type { WorkflowState } from './schema.ts';

/** What a policy decision reads about its run besides the facts of the action, with the run locked. */
export interface DecisionContext {
  /** The workflow's state now. */
  state: WorkflowState;
  /** Whether its release may make consequential writes ({@link writesEnabledSql}). */
  writesEnabled: boolean;
  /** The state the proposal's tools were offered in (null: not recorded, judge by `state`). */
  offeredInState: string | null;
  /** The run's wall-time deadline (epoch ms; null: no budget row), for `checkWorkingTime`. */
  deadlineAtMs: number | null;
  /**
   * True when the requester added a follow-up message after the model made the proposal's call
   * (a later `user_message` item than its `function_call`): the call was made on an outdated
   * transcript (docs/product/public-contract.md#follow-up-messages). Computed only when asked
   * for (`{ proposalId, followUp: true }`: the policy gateway's decision); always false otherwise,
   * as when read by `actionId` or by the executor's re-evaluation of an action's proposal.
   */
  followedUp: boolean;
}

/**
 * Locks the workflow row (`FOR UPDATE`: the first lock of every transaction that decides or
 * claims, docs/decisions/0014-row-lock-order.md) and reads, in the same statement, its state, its
 * release's writes switch, its wall-time deadline and the state the proposal was offered in — the
 * proposal named by `by.proposalId`, or that of the action `by.actionId` (the executor's claim).
 * With `by.followUp: true` (the policy gateway's decision, docs/decisions/0490-follow-up-before-the-decision.md)
 * it also reads whether a follow-up message came after the proposal's call (an `EXISTS` over the
 * run's conversation items); otherwise that subquery is not run and `followedUp` is false. One
 * round trip instead of four (docs/decisions/0340-refund-sums-on-the-action-row.md,
 * 0390-guards-in-the-update.md).
 * @returns undefined when the workflow does not exist.
 */
export async function lockWorkflowForDecision(
  trx: Trx,
  workflowId: string,
  by: { proposalId: string; followUp?: boolean } | { actionId: string },
): Promise<DecisionContext | undefined> {
  const row = await decisionContextQuery(trx, workflowId, by).executeTakeFirst();
  return row && toDecisionContext(row);
}

/** The row {@link decisionContextQuery} returns (as the driver gives it, or as `to_jsonb` writes it). */
export interface DecisionContextRow {
  id: string;
  state: WorkflowState;
  writes_enabled: boolean;
  offered_in_state: string | null;
  deadline_at: Date | string | null;
  followed_up: boolean;
}

/**
 * The statement of {@link lockWorkflowForDecision}: the workflow row locked (`FOR UPDATE`) with
 * what a decision reads about its run, one row of {@link DecisionContextRow} (none when the
 * workflow does not exist). Also the first CTE of the claim's statement that locks the run, then
 * the action (`lockActionAndReserve` with `lockRun`).
 */
export function decisionContextQuery(trx: Trx, workflowId: string, by: { proposalId: string; followUp?: boolean } | { actionId: string }) {
  const offered =
    'proposalId' in by
      ? sql<string | null>`(select p.offered_in_state from proposals p where p.id = ${by.proposalId})`
      : sql<string | null>`(select p.offered_in_state from actions a join proposals p on p.id = a.proposal_id where a.id = ${by.actionId})`;
  // Both items are written under this row's lock, so their ids follow the order of their commits.
  const followedUp =
    'proposalId' in by && by.followUp
      ? sql<boolean>`exists (select 1 from conversation_items u where u.workflow_id = w.id and u.kind = 'user_message' and u.id > (
          select c.id from proposals p join conversation_items c
            on c.workflow_id = p.workflow_id and c.kind = 'function_call' and c.call_id = p.call_id
          where p.id = ${by.proposalId}))`
      : sql<boolean>`false`;
  return trx
    .selectFrom('workflows as w')
    .select([
      'w.id',
      'w.state',
      writesEnabledSql(sql.ref('w.release_id')).as('writes_enabled'),
      offered.as('offered_in_state'),
      sql<Date | null>`(select b.deadline_at from budgets b where b.workflow_id = w.id)`.as('deadline_at'),
      followedUp.as('followed_up'),
    ])
    .where('w.id', '=', workflowId)
    .forUpdate();
}

/** A {@link DecisionContextRow} as the {@link DecisionContext} it describes. */
export function toDecisionContext(row: DecisionContextRow): DecisionContext {
  return {
    state: row.state,
    writesEnabled: row.writes_enabled,
    offeredInState: row.offered_in_state,
    deadlineAtMs: row.deadline_at === null ? null : new Date(row.deadline_at).getTime(),
    followedUp: row.followed_up,
  };
}
