import { randomUUID } from 'node:crypto';
import type { ApprovalRequestJob } from '@gatehouse/contracts';
import { inTransaction, recordAudit, type Db } from '@gatehouse/ledger';
import { approvalAmountCents, type PolicyBundles } from '@gatehouse/policy';

/**
 * Opens the approval record for an action version that policy sent to approval (queue
 * `approval-requests`). One approval per action (unique `action_id`), so redelivery is a no-op.
 * The amount an approver's limit must cover is the refund amount, or for a reship the order's
 * paid amount (docs/decisions); a change schedule has none. Lifetime, approver role and region
 * rule from the bundle of the workflow's pack (support-p1: a lead of the region, 15 minutes;
 * change-c1: a change owner of the tenant, 600 s). The approval carries the run's release at
 * the time it opens (docs/product/releases.md). The action is read under its row lock, so an action a
 * follow-up superseded meanwhile is skipped (`skipped:superseded`), never given a pending approval.
 */
export async function processApprovalRequest(job: ApprovalRequestJob, deps: { db: Db; bundles: PolicyBundles }): Promise<string> {
  return inTransaction(deps.db, async (trx) => {
    // In the one row-lock order (workflows → actions → approvals, ADR 0014): the run's row first
    // (KEY SHARE, which the approval's foreign key takes anyway, and which waits for a follow-up
    // holding the run), then the action's. A follow-up that supersedes the action (and voids its
    // approvals) meanwhile is waited for, so no approval is opened for a superseded version; and
    // the action locked before the run would deadlock with that follow-up.
    const wf = await trx.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).forKeyShare().executeTakeFirstOrThrow();
    const action = await trx
      .selectFrom('actions')
      .selectAll()
      .where('id', '=', job.actionId)
      .where('workflow_id', '=', wf.id)
      .forUpdate()
      .executeTakeFirstOrThrow();
    if (action.status !== 'pending_approval') return `skipped:${action.status}`;
    const rules = deps.bundles[wf.pack].approval;
    const facts = action.facts as { orderPaidCents?: number | null; requesterRegion?: string | null };
    const amountCents = approvalAmountCents(wf.pack, action.arguments, facts);
    const id = randomUUID();
    const inserted = await trx
      .insertInto('approvals')
      .values({
        id,
        workflow_id: wf.id,
        action_id: action.id,
        action_version: action.version,
        action_digest: action.digest,
        policy_revision: action.policy_revision,
        tool: action.tool,
        tenant: wf.tenant,
        region: facts.requesterRegion ?? null,
        amount_cents: amountCents,
        requester: wf.user_id,
        rule_id: action.rule_id,
        status: 'pending',
        approver: null,
        reason: null,
        // The run's release now, not the action's: after a rollback and `queues requeue` the run is on
        // the former release, and what this approval starts must go to that release's queues.
        release_id: wf.release_id,
        traceparent: job.traceparent ?? null,
        approver_role: rules.approverRole,
        same_region: rules.sameRegion,
        expires_at: new Date(Date.now() + rules.ttlSeconds * 1000),
        decided_at: null,
        used_at: null,
      })
      .onConflict((oc) => oc.column('action_id').doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!inserted) return 'already_open';
    await recordAudit(trx, {
      type: 'approval.requested',
      service: 'approval',
      runId: wf.id,
      tool: action.tool,
      actionDigest: action.digest,
      actionVersion: action.version,
      approvalId: id,
      callId: action.call_id,
      ruleId: action.rule_id,
      revisions: { policy: action.policy_revision, release: wf.release_id },
    });
    return 'opened';
  });
}
