import { z } from 'zod';
import type { Db } from '@gatehouse/ledger';
import { authorityRefusal } from './authority.ts';

/**
 * The trusted view of an approval that approvers see (API and inbox alike): tool, target,
 * normalized arguments in human units, the authoritative order facts the rule used, requester,
 * rule, version, digest, policy revision, expiry — built from the ledger, never from model text.
 * `canDecide`/`refusal`: whether the viewer may decide it, and if not, why (docs/product/policy-rules.md#approvals).
 */
export const ApprovalViewSchema = z.object({
  approvalId: z.uuid(),
  workflowId: z.uuid(),
  tool: z.string(),
  target: z.string(),
  arguments: z.record(z.string(), z.unknown()).describe('normalized arguments; amounts also as `amount` in currency units'),
  orderFacts: z
    .record(z.string(), z.unknown())
    .describe('authoritative facts the rule used: the order (cents), or the change and plan with environment, effect and rollback'),
  requester: z.string(),
  tenant: z.string(),
  approverRole: z.string().describe('role that may decide: lead (support) or change_owner (change)'),
  singleUse: z.literal(true).describe('an approval is consumed by exactly one execution'),
  ruleId: z.string(),
  actionVersion: z.number().int(),
  actionDigest: z.string(),
  policyRevision: z.string(),
  amountCents: z.number().int().nullable(),
  status: z.enum(['pending', 'approved', 'denied', 'expired', 'void', 'used']),
  expiresAt: z.iso.datetime(),
  canDecide: z.boolean(),
  refusal: z.string().nullable(),
});
export type ApprovalView = z.infer<typeof ApprovalViewSchema>;

/** Selects approvals joined with their action, scoped to a tenant. */
export function selectApprovals(db: Db, tenant: string) {
  return db
    .selectFrom('approvals as p')
    .innerJoin('actions as a', 'a.id', 'p.action_id')
    .select([
      'p.id',
      'p.workflow_id',
      'p.tool',
      'a.target',
      'a.arguments',
      'a.facts',
      'p.requester',
      'p.rule_id',
      'p.action_version',
      'p.action_digest',
      'p.policy_revision',
      'p.amount_cents',
      'p.status',
      'p.expires_at',
      'p.tenant',
      'p.region',
      'p.approver_role',
      'p.same_region',
    ])
    .where('p.tenant', '=', tenant);
}

type Row = Awaited<ReturnType<ReturnType<typeof selectApprovals>['execute']>>[number];

/** Turns a row into the trusted view for `viewerId` (amounts also shown in currency units). */
export function toView(r: Row, viewerId: string): ApprovalView {
  const args: Record<string, unknown> = { ...r.arguments };
  if (typeof args.amountCents === 'number') args.amount = (args.amountCents / 100).toFixed(2);
  const refusal = authorityRefusal(viewerId, r.tenant, {
    tenant: r.tenant,
    region: r.region,
    requester: r.requester,
    amountCents: r.amount_cents,
    approverRole: r.approver_role,
    sameRegion: r.same_region,
  });
  return {
    approvalId: r.id,
    workflowId: r.workflow_id,
    tool: r.tool,
    target: r.target,
    arguments: args,
    orderFacts: r.facts,
    requester: r.requester,
    tenant: r.tenant,
    approverRole: r.approver_role,
    singleUse: true,
    ruleId: r.rule_id,
    actionVersion: r.action_version,
    actionDigest: r.action_digest,
    policyRevision: r.policy_revision,
    amountCents: r.amount_cents,
    status: r.status,
    expiresAt: new Date(r.expires_at).toISOString(),
    canDecide: refusal === null && r.status === 'pending',
    refusal,
  };
}
