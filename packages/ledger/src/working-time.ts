import { sql } from 'kysely';
import { AS_A_NEW_TICKET, SystemError, type OutageMark, type Dependency, testFaults } from '@gatehouse/contracts';
import { inTransaction, type Db, type Trx } from './db.ts';
import { TERMINAL_STATES } from './schema.ts';
import { LIVE_STATES } from './transitions.ts';
import { unclaimedActionsOf } from './unclaimed-actions.ts';

/**
 * The run's working time (docs/decisions/0015-working-time.md, 0110-outage-time.md): the
 * wall-time budget `budgets.deadline_at` counts only the run's own work. Time it waits for a
 * person (an approval), for on-call (a paused tool) or for an unavailable dependency (an
 * outage) is credited back to the deadline, each instant once (`budgets.wait_credited_until`).
 * An outage is credited up to a ceiling; past it the run stops `dependency_unavailable`.
 */

/** Stop reason of a run that waited on an unavailable dependency longer than the ceiling. */
export const DEPENDENCY_UNAVAILABLE = 'dependency_unavailable';

/** How a service credits outages: the ceiling, and whether outages are credited at all. */
export interface OutagePolicy {
  /** Longest outage a run waits through, ms; past it the run stops `dependency_unavailable`. */
  ceilingMs: number;
  /** False only in the control-removed test (`GATEHOUSE_TEST_DISABLE_OUTAGE_CREDIT=1`). */
  credit: boolean;
}

/**
 * Reads the outage policy: the ceiling from the parsed settings, the control-removal switch from
 * the raw environment.
 * @throws Error when the switch is set outside `GATEHOUSE_ENV=test`.
 */
export function readOutagePolicy(ceilingMs: number, env: Record<string, string | undefined>): OutagePolicy {
  return { ceilingMs, credit: !testFaults(env).disableOutageCredit };
}

/**
 * Thrown when a step cannot go on because `dependency` does not answer (5xx, refused, timed
 * out, unhealthy). The queue worker holds the job for it without using an attempt, and the
 * wait is credited when the job runs again (see `holdWhileUnavailable` in the platform).
 */
export class DependencyUnavailable extends SystemError {
  readonly dependency: Dependency;
  constructor(dependency: Dependency, message: string, options?: { cause?: unknown }) {
    super(DEPENDENCY_UNAVAILABLE, message, options);
    this.dependency = dependency;
  }
}

/**
 * Credits a wait that began at `since` to the run's deadline: moves `deadline_at` forward by the
 * part of [since, now] after `wait_credited_until`, then advances that mark to now. Overlapping
 * waits (two approvals, an approval during a pause or an outage) therefore count once. Use for
 * every wait that is not the run's working time; the caller holds the transaction.
 */
export async function creditWait(trx: Trx, workflowId: string, since: Date): Promise<void> {
  await trx
    .updateTable('budgets')
    .set({
      deadline_at: sql`deadline_at + greatest(interval '0', now() - greatest(${since}::timestamptz, coalesce(wait_credited_until, ${since}::timestamptz)))`,
      wait_credited_until: sql`greatest(now(), coalesce(wait_credited_until, now()))`,
    })
    .where('workflow_id', '=', workflowId)
    .execute();
}

/**
 * Credits the waits on people that a follow-up message ends (docs/product/public-contract.md#follow-up-messages,
 * docs/decisions/0676-a-follow-up-ends-the-wait-on-people.md): the follow-up supersedes every
 * unclaimed action, so the run no longer waits for a decision on its pending approvals (each
 * voided, never decided, so no decision credits it), nor for an approved step held by a switch,
 * the audit gate or an outage (credited only by its claim, which now never comes): the wait since
 * the oldest unclaimed action was recorded is credited here, its approval opened or not
 * (docs/decisions/0750-the-wait-for-an-approval-starts-at-its-action.md,
 * 0751-a-follow-up-ends-the-wait-on-a-held-step.md). A pause since `budgets.paused_at` is credited
 * too and the mark cleared, so a later pause starts afresh. Without it the model's turn on the
 * follow-up found the deadline passed by the wait and stopped the run `budget_exhausted`. Call
 * in the follow-up's transaction, under the workflow row lock and before the approvals are voided.
 */
export async function creditWaitsEndedByFollowUp(trx: Trx, workflowId: string): Promise<void> {
  // Since the oldest unclaimed action was recorded: awaiting its approval (opened or not, ADR
  // 0750), or approved and held — by a switch, the audit gate, an outage (ADR 0751) — or since
  // the run paused, whichever began first: one credit from the earliest, so a later start never
  // masks an earlier one. A pending approval's action is `pending_approval` (unclaimed), recorded
  // before the approval opened (the approval's foreign key), so no approval starts a wait earlier.
  const unclaimed = await unclaimedActionsOf(trx, workflowId)
    .select((eb) => eb.fn.min('a.created_at').as('since'))
    .executeTakeFirst();
  const budget = await trx.selectFrom('budgets').select('paused_at').where('workflow_id', '=', workflowId).forUpdate().executeTakeFirst();
  const starts = [unclaimed?.since, budget?.paused_at].filter((d) => d != null).map((d) => new Date(d as Date | string));
  if (starts.length) await creditWait(trx, workflowId, new Date(Math.min(...starts.map((d) => d.getTime()))));
  if (budget?.paused_at) await trx.updateTable('budgets').set({ paused_at: null }).where('workflow_id', '=', workflowId).execute();
}

/**
 * Credits the wait of the live runs of `release` that on-call's drain held
 * (docs/decisions/0699-a-drain-is-on-call-s-wait.md): for each, the time since the drain began
 * (`releases.draining_since`) or since the run was submitted, if later, like a tool on-call
 * paused (each instant once, {@link creditWait}). Without it a run held past its wall-time budget
 * stopped `budget_exhausted` on its first step after the hold, having done nothing. Call in the
 * transaction that ends the hold (resume, an activation or rollback restoring `release`), or that
 * moves the runs away (requeue: `except` names the runs that stay), before `draining_since` is
 * cleared. Locks the runs' rows in id order (the order every writer locks workflows in).
 * Returns how many runs were credited (0 when `release` is not draining or not registered).
 */
export async function creditDrainWait(trx: Trx, release: string, except: ReadonlySet<string> = new Set()): Promise<number> {
  const r = await trx.selectFrom('releases').select('draining_since').where('id', '=', release).executeTakeFirst();
  if (!r?.draining_since) return 0;
  const drainedAt = new Date(r.draining_since).getTime();
  const runs = await trx
    .selectFrom('workflows')
    .select(['id', 'created_at'])
    .where('release_id', '=', release)
    .where('state', 'in', LIVE_STATES)
    .$if(except.size > 0, (q) => q.where('id', 'not in', [...except]))
    .orderBy('id')
    // The runs' rows first, in id order, then their budgets: the order every service locks them in
    // (a turn holds its run, then writes its budget), so a job still running during a requeue
    // cannot deadlock with it.
    .forUpdate()
    .execute();
  for (const w of runs) await creditWait(trx, w.id, new Date(Math.max(drainedAt, new Date(w.created_at).getTime())));
  return runs.length;
}

/** What {@link checkWorkingTime} found. */
export type WorkingTimeVerdict =
  /** Time is left: `deadlineAtMs` is the run's deadline the verdict judged (epoch ms, after any credit; null without a budget row). */
  | { kind: 'ok'; deadlineAtMs: number | null }
  | { kind: 'budget_exhausted' }
  /** The outage outlasted the ceiling; `nextStep` is the rep's and on-call's next step. */
  | { kind: 'dependency_unavailable'; dependency: Dependency; nextStep: string };

const DEPENDENCY_LABEL: Record<Dependency, string> = {
  postgres: 'the ledger database',
  redis: 'the queue store (Redis)',
  audit: 'audit storage',
  model: 'the model',
  system_of_record: 'a system of record',
};

/** The next step of a run stopped `dependency_unavailable` (names the dependency and the ceiling). */
export function outageNextStep(dependency: Dependency, ceilingMs: number): string {
  const span = ceilingMs >= 60_000 ? `${Math.round(ceilingMs / 60_000)} min` : `${Math.round(ceilingMs / 1000)} s`;
  const who = DEPENDENCY_LABEL[dependency];
  return (
    `${who.charAt(0).toUpperCase()}${who.slice(1)} was unavailable for more than ${span}, so the run stopped waiting. ` +
    `On-call should restore it; then see the actions for what already ran and resubmit the rest ${AS_A_NEW_TICKET}.`
  );
}

/** True when the outage a held step waits through (`outage`) has lasted longer than the ceiling. */
export function outageOutlasted(outage: OutageMark | undefined, policy: OutagePolicy, nowMs = Date.now()): boolean {
  return outage !== undefined && nowMs - outage.sinceMs > policy.ceilingMs;
}

/**
 * The wall-time check before a step is dispatched (a model request, the first claim of an
 * effect). When the step waited through an outage (`outage`, carried by its job), the wait is
 * first credited like a person's wait — unless `policy.credit` is off — and an outage longer
 * than `policy.ceilingMs` ends the run's waiting: `dependency_unavailable`, never
 * `budget_exhausted`. Otherwise the deadline decides. Runs in the caller's transaction.
 * `known.deadlineAtMs`: the deadline the caller read in this transaction with the run's lock
 * (`lockWorkflowForDecision`; the budget row itself is not locked, as it was not before); used
 * unless this call's credit just moved it, else the budget row is read. A known deadline that
 * has passed is read again before the verdict (it may predate a credit committed while the lock
 * was awaited).
 */
export async function checkWorkingTime(
  trx: Trx,
  workflowId: string,
  outage: OutageMark | undefined,
  policy: OutagePolicy,
  known?: { deadlineAtMs: number | null },
): Promise<WorkingTimeVerdict> {
  let deadline = known;
  if (outage) {
    if (outageOutlasted(outage, policy))
      return {
        kind: 'dependency_unavailable',
        dependency: outage.dependency,
        nextStep: outageNextStep(outage.dependency, policy.ceilingMs),
      };
    if (policy.credit) {
      await creditWait(trx, workflowId, new Date(outage.sinceMs));
      deadline = undefined; // moved by the credit: read it again
    }
  }
  deadline ??= await readDeadline(trx, workflowId);
  // The deadline the caller read with the run's lock comes from that statement's snapshot, taken
  // before it waited for the lock: a credit committed by the lock's former holder (on-call's
  // resume, ADR 0620) is not in it. A passed one is read again, now under the lock, before it
  // stops the run; a deadline still ahead needs no second read.
  if (deadline === known && passed(deadline)) deadline = await readDeadline(trx, workflowId);
  return passed(deadline) ? { kind: 'budget_exhausted' } : { kind: 'ok', deadlineAtMs: deadline.deadlineAtMs };
}

/** Whether a run's wall-time deadline has passed (none without a budget row). */
function passed(deadline: { deadlineAtMs: number | null }, nowMs = Date.now()): boolean {
  return deadline.deadlineAtMs !== null && deadline.deadlineAtMs <= nowMs;
}

/** The run's wall-time deadline (epoch ms; null without a budget row). */
async function readDeadline(trx: Trx, workflowId: string): Promise<{ deadlineAtMs: number | null }> {
  const budget = await trx.selectFrom('budgets').select('deadline_at').where('workflow_id', '=', workflowId).executeTakeFirst();
  return { deadlineAtMs: budget ? new Date(budget.deadline_at).getTime() : null };
}

/**
 * Credits the outage a held job waited through (`outage` from its data), for a step that
 * dispatches nothing itself (a policy decision, an approval request): the step that later
 * checks the deadline then sees the wait already credited. No-op without an outage or with the
 * credit switched off.
 */
export async function creditOutage(db: Db, workflowId: string, outage: OutageMark | undefined, policy: OutagePolicy): Promise<void> {
  if (!outage || !policy.credit) return;
  await inTransaction(db, (trx) => creditWait(trx, workflowId, new Date(outage.sinceMs)));
}

/**
 * Says why a held run waits, in its next step: which dependency is unavailable, since when, and
 * when the wait ends (the ceiling). Leaves a finished run alone; the run's next step changes
 * again when it moves on.
 * @throws the database error when the ledger cannot be written (a ledger outage: callers ignore it).
 */
export async function noteOutageWait(db: Db, workflowId: string, outage: OutageMark, policy: OutagePolicy): Promise<void> {
  const since = new Date(outage.sinceMs).toISOString();
  const until = new Date(outage.sinceMs + policy.ceilingMs).toISOString();
  await db
    .updateTable('workflows')
    .set({
      next_step: `Waiting: ${DEPENDENCY_LABEL[outage.dependency]} is unavailable (since ${since}); the run resumes when it answers, or stops at ${until}.`,
      updated_at: new Date(),
    })
    .where('id', '=', workflowId)
    .where('state', 'not in', [...TERMINAL_STATES])
    .execute();
}
