import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, OperationStatus } from '@gatehouse/ledger';
import { createAction, recordEffect } from '@gatehouse/testing';

/** One seeded agent step: its workflow, action and operation (and approval's id when `approval`). */
export interface SeededStep {
  workflowId: string;
  actionId: string;
  callId: string;
  key: string;
  approvalId: string | null;
}

/**
 * Writes a step straight into the ledger, as the agent loop, gateway and executor would have left
 * it: a workflow, a proposal, one action version and its operation (none when `opStatus` is null:
 * a step the gateway left awaiting its approval); an approval when `approval` says `used` (decided
 * and consumed) or `pending` (undecided), of a lead (R7) or for a change its owner (C2); the call
 * answered (a `function_call_output`) unless `answered` is false. A `schedule_change` step is a
 * change-pack run of eng-lou (quillfeather, change-c1) whose `orderId` is the plan id it schedules.
 */
export async function seedStep(
  db: Db,
  o: {
    tool: 'issue_refund' | 'reship_order' | 'notify_customer' | 'schedule_change';
    /** The step's target: an order id, or a plan id for `schedule_change`. */
    orderId: string;
    amountCents?: number;
    /** The operation's status; null: no operation yet (then `actionStatus` says the action's). */
    opStatus: OperationStatus | null;
    actionStatus?: string;
    workflowState?: string;
    decision?: 'ALLOW' | 'REQUIRE_APPROVAL';
    approval?: 'used' | 'pending';
    answered?: boolean;
    baselineShipments?: number;
    leaseExpiredMs?: number;
    /** Mail template of a `notify_customer` step. */
    template?: string;
  },
): Promise<SeededStep> {
  const workflowId = randomUUID();
  const proposalId = randomUUID();
  const actionId = randomUUID();
  const callId = `call_${workflowId.slice(0, 8)}`;
  const key = `${workflowId}:action:1`;
  const change = o.tool === 'schedule_change';
  const policy = change ? 'change-c1' : 'support-p1';
  const args = change
    ? { planId: o.orderId }
    : o.tool === 'issue_refund'
      ? { orderId: o.orderId, amountCents: o.amountCents, reason: 'damaged item' }
      : o.tool === 'notify_customer'
        ? { orderId: o.orderId, template: o.template ?? 'refund_issued' }
        : { orderId: o.orderId };
  const decision = o.decision ?? (change ? 'REQUIRE_APPROVAL' : 'ALLOW');
  await db
    .insertInto('workflows')
    .values({
      id: workflowId,
      tenant: 'quillfeather',
      ticket_id: `${change ? 'C' : 'T'}-${workflowId.slice(0, 8)}`,
      user_id: change ? 'eng-lou' : 'rep-ana',
      pack: change ? 'change' : 'support',
      mode: 'act',
      text_sha256: 'seeded',
      state: (o.workflowState ?? 'completed') as never,
      release_id: 'rel-1',
      policy_revision: policy,
      catalog_digest: 'seeded',
    })
    .execute();
  await db
    .insertInto('proposals')
    .values({
      id: proposalId,
      workflow_id: workflowId,
      round: 1,
      call_id: callId,
      tool: o.tool,
      arguments_sha256: 'seeded',
      status: 'valid',
    })
    .execute();
  await db
    .insertInto('actions')
    .values({
      id: actionId,
      workflow_id: workflowId,
      proposal_id: proposalId,
      call_id: callId,
      version: 1,
      supersedes_version: null,
      tool: o.tool,
      target: o.orderId,
      arguments: JSON.stringify(args),
      digest: `digest-${actionId}`,
      decision,
      rule_id: decision === 'ALLOW' ? 'ALLOW' : change ? 'C2' : 'R7',
      policy_revision: policy,
      status: (o.actionStatus ?? (o.opStatus === 'running' ? 'running' : o.opStatus)) as never,
      operation_key: key,
      release_id: 'rel-1',
      facts: '{}',
    })
    .execute();
  const approvalId = o.approval ? randomUUID() : null;
  if (o.approval) {
    const used = o.approval === 'used';
    await db
      .insertInto('approvals')
      .values({
        id: approvalId!,
        workflow_id: workflowId,
        action_id: actionId,
        action_version: 1,
        action_digest: `digest-${actionId}`,
        policy_revision: policy,
        tool: o.tool,
        tenant: 'quillfeather',
        region: change ? null : 'US',
        amount_cents: o.amountCents ?? null,
        requester: change ? 'eng-lou' : 'rep-ana',
        rule_id: change ? 'C2' : 'R7',
        status: o.approval,
        approver_role: change ? 'change_owner' : 'lead',
        approver: used ? (change ? 'own-kim' : 'lead-eli') : null,
        release_id: 'rel-1',
        expires_at: new Date(Date.now() + (change ? 3_600_000 : 600_000)),
        decided_at: used ? new Date() : null,
        used_at: used ? new Date() : null,
      })
      .execute();
  }
  if (o.opStatus === null) return { workflowId, actionId, callId, key, approvalId };
  await db
    .insertInto('operations')
    .values({
      key,
      workflow_id: workflowId,
      action_id: actionId,
      action_digest: `digest-${actionId}`,
      tool: o.tool,
      status: o.opStatus,
      fencing_token: 1,
      lease_owner: o.opStatus === 'running' ? 'a-worker-that-died' : null,
      lease_expires_at: o.opStatus === 'running' ? new Date(Date.now() - (o.leaseExpiredMs ?? 60_000)) : null,
      baseline: o.baselineShipments === undefined ? null : JSON.stringify({ shipments: o.baselineShipments }),
      dispatched_at: new Date(),
      attempts: 1,
      release_id: 'rel-1',
    })
    .execute();
  if (o.answered !== false) {
    await db
      .insertInto('conversation_items')
      .values({
        workflow_id: workflowId,
        round: 1,
        kind: 'function_call_output',
        call_id: callId,
        item: JSON.stringify({ type: 'function_call_output', call_id: callId, output: '{}' }),
      })
      .execute();
  }
  return { workflowId, actionId, callId, key, approvalId };
}

/** A refund written straight into the payments ledger (the staging schema of the same database). */
export async function seedRefund(db: Db, r: { key: string; orderId: string; amountCents: number; tenant?: string }): Promise<string> {
  const refundId = `re_seed${randomUUID().replace(/-/g, '').slice(0, 17)}`;
  await sql`INSERT INTO staging.refunds (refund_id, idempotency_key, order_id, tenant, amount_cents, reason, requester, actor)
    VALUES (${refundId}, ${r.key}, ${r.orderId}, ${r.tenant ?? 'quillfeather'}, ${r.amountCents}, 'seeded', 'rep-ana', 'support-agent')`.execute(
    db,
  );
  return refundId;
}

/**
 * A shipment written straight into the order system. `opts.createdInMs` places its creation that
 * many milliseconds from now (the order system lists shipments oldest first); `opts.shipmentId`
 * names it (a random `shp_seed…` id otherwise).
 */
export async function seedShipment(
  db: Db,
  orderId: string,
  opts: { tenant?: string; shipmentId?: string; createdInMs?: number } = {},
): Promise<string> {
  const shipmentId = opts.shipmentId ?? `shp_seed${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  const createdAt = new Date(Date.now() + (opts.createdInMs ?? 0));
  await sql`INSERT INTO staging.shipments (shipment_id, order_id, tenant, requester, actor, created_at)
    VALUES (${shipmentId}, ${orderId}, ${opts.tenant ?? 'quillfeather'}, 'rep-ana', 'support-agent', ${createdAt})`.execute(db);
  return shipmentId;
}

/**
 * A `schedule_change` step of quillfeather (a change-pack run of rep-ana) whose action and
 * operation are both `status`, its run in `workflowState`: what `gatehouse change cancel` reads.
 * Returns its operation key.
 */
export async function seedScheduleStep(
  db: Db,
  status: 'succeeded' | 'running' | 'failed_unknown',
  workflowState: 'completed' | 'needs_reconciliation',
): Promise<string> {
  const a = await createAction(db, { orderId: 'O-1001', tool: 'reship_order', decision: 'ALLOW', approved: false, userId: 'rep-ana' });
  await db.updateTable('workflows').set({ pack: 'change', state: workflowState }).where('id', '=', a.workflowId).execute();
  await db.updateTable('actions').set({ tool: 'schedule_change' }).where('id', '=', a.actionId).execute();
  await recordEffect(db, a, { status });
  return a.operationKey;
}
