import type { Trx } from './db.ts';
import { recordAudit } from './audit.ts';
import { transitionAction } from './transitions.ts';

/**
 * Why unclaimed actions end: their run stopped, or parked for reconciliation; a follow-up message
 * superseded them (the requester changed what they asked); or (one action) the executor refused
 * its job's approval as unusable and answered its call `executed: false`.
 */
export type UnclaimedEnd = 'run_stopped' | 'run_parked' | 'superseded' | 'approval_unusable';

/** An action {@link endUnclaimedActions} ended: its version, tool and call, and the approvals it voided. */
export interface EndedAction {
  id: string;
  tool: string;
  version: number;
  /** The model's `call_id` of the action's function call (the caller may answer it). */
  callId: string;
  voidedApprovals: string[];
}

/**
 * Ends the actions of a run that will never run because the run stopped or parked for
 * reconciliation (a claim only starts an effect in a run that may move to `executing`): each
 * unclaimed version — `approved` or `pending_approval`, no operation past `pending` — moves to
 * `superseded` through the transition table, and its open approvals (`pending`, `approved`) are
 * voided, each with an `approval.voided` audit event (outcome `why`). Without this, an approved
 * refund left in a stopped run counts as queued money out in every later limit check of its
 * order, user and tenant, for ever, and its approval stays listed
 * (docs/decisions/0610-a-stopped-run-ends-its-unclaimed-actions.md). Running and finished
 * actions are left as they are. The caller holds the workflow row lock (lock order: workflows →
 * actions → approvals). With `only`, ends that one action of the run if it is still unclaimed
 * (the executor's refusal of an unusable approval, ADR 0610). The one selection and end of a run's
 * unclaimed actions, also the follow-up's (`superseded`, whose route answers each call). Returns the
 * actions it ended, in version order.
 */
export async function endUnclaimedActions(
  trx: Trx,
  wf: { id: string; release_id: string },
  why: UnclaimedEnd,
  service: string,
  only?: { actionId: string },
): Promise<EndedAction[]> {
  let q = unclaimedActionsOf(trx, wf.id).select(['a.id', 'a.tool', 'a.version', 'a.digest', 'a.call_id', 'a.status']);
  if (only) q = q.where('a.id', '=', only.actionId);
  const unclaimed = await q.orderBy('a.version').forUpdate().execute();
  const ended: EndedAction[] = [];
  for (const a of unclaimed) {
    await transitionAction(trx, a.id, { to: 'superseded', lockedFrom: a.status });
    const voidedApprovals = await voidOpenApprovals(trx, wf, a, why, service);
    ended.push({ id: a.id, tool: a.tool, version: a.version, callId: a.call_id, voidedApprovals });
  }
  return ended;
}

/**
 * The unclaimed actions of run `workflowId` (alias `a`), the one definition: `approved` or
 * `pending_approval`, with no operation past `pending` — what a stop, a park or a follow-up ends
 * ({@link endUnclaimedActions}), and what a follow-up stops the run waiting on
 * (`creditWaitsEndedByFollowUp`, ADR 0751). The caller selects its columns.
 */
export function unclaimedActionsOf(trx: Trx, workflowId: string) {
  return trx
    .selectFrom('actions as a')
    .where('a.workflow_id', '=', workflowId)
    .where('a.status', 'in', ['approved', 'pending_approval'])
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('operations as o').select('o.key').whereRef('o.action_id', '=', 'a.id').where('o.status', '<>', 'pending'))),
    );
}

/**
 * Voids the open approvals (`pending`, `approved`) of an action that will not run — superseded
 * by a follow-up or a re-evaluation, or ended with its run — each with an `approval.voided` audit
 * event whose outcome says why (`superseded`, `run_stopped`, `run_parked`, `approval_unusable`). The one writer of
 * that void, in the caller's transaction (which holds the action's row lock). Returns the voided
 * approval ids.
 */
export async function voidOpenApprovals(
  trx: Trx,
  wf: { id: string; release_id: string },
  a: { id: string; tool: string; version: number; digest: string; call_id: string },
  outcome: string,
  service: string,
): Promise<string[]> {
  const voided = await trx
    .updateTable('approvals')
    .set({ status: 'void', decided_at: new Date(), reason: outcome })
    .where('action_id', '=', a.id)
    .where('status', 'in', ['pending', 'approved'])
    .returning('id')
    .execute();
  for (const v of voided)
    await recordAudit(trx, {
      type: 'approval.voided',
      service,
      runId: wf.id,
      tool: a.tool,
      approvalId: v.id,
      actionVersion: a.version,
      actionDigest: a.digest,
      callId: a.call_id,
      outcome,
      revisions: { release: wf.release_id },
    });
  return voided.map((v) => v.id);
}
