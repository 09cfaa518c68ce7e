import { loadWorld, RELEASE_APPROVER_ROLE, RELEASE_APPROVER_ROLES } from '@gatehouse/contracts';
import { isTerminal, type WorkflowState } from '@gatehouse/ledger';
import { Forbidden } from '@gatehouse/platform';

/** The approval fields authority depends on. Amount in integer cents. */
export interface ApprovalSubject {
  tenant: string;
  region: string | null;
  requester: string;
  amountCents: number | null;
  /** Role the approver must hold (`lead` for support-p1, `change_owner` for change-c1, `release_approver` for a release override). */
  approverRole: string;
  /** Whether the approver must be in the requester's region. */
  sameRegion: boolean;
}

/**
 * Why `approverId` may not decide `approval`, or null when they may (docs/product/policy-rules.md#approvals,
 * docs/product/users-and-tools.md#change-pack): the requester can never approve; the approver must hold the approval's role
 * (`lead` → `not_a_lead`, `change_owner` → `not_a_change_owner`; `release_approver`, a release
 * override's, is held by a policy owner or an operator → `not_a_release_approver`) in the
 * requester's tenant, be in the requester's region when the bundle says so, and have an approve
 * limit covering the amount (when the approval has one).
 */
export function authorityRefusal(approverId: string, tenant: string, approval: ApprovalSubject): string | null {
  const approver = loadWorld().users.find((u) => u.id === approverId && u.tenant === tenant);
  if (!approver) return 'unknown_approver';
  if (approver.id === approval.requester) return 'requester_cannot_approve';
  if (!holdsRole(approver.role, approval.approverRole)) return `not_a_${approval.approverRole}`;
  if (approver.tenant !== approval.tenant) return 'wrong_tenant';
  if (approval.sameRegion && (!approval.region || approver.region !== approval.region)) return 'wrong_region';
  if (approval.amountCents !== null && (approver.approveLimit ?? 0) < approval.amountCents) return 'approve_limit_too_low';
  return null;
}

/** Whether a directory role holds an approval's role: itself, or for a release override a policy owner or an operator (ADR 0230). */
function holdsRole(directoryRole: string, approverRole: string): boolean {
  if (approverRole === RELEASE_APPROVER_ROLE) return RELEASE_APPROVER_ROLES.includes(directoryRole);
  return directoryRole === approverRole;
}

/** @throws Forbidden (403) with the refusal reason when the approver lacks authority. */
export function assertAuthority(approverId: string, tenant: string, approval: ApprovalSubject): void {
  const refusal = authorityRefusal(approverId, tenant, approval);
  if (refusal) throw new Forbidden(refusal, `not authorized to decide this approval: ${refusal}`);
}

/** Why a pending approval can no longer be decided by anyone (410), with the sentence the answer carries. */
export interface LateRefusal {
  /** `workflow_<state>` (its run ended) or `expired`. */
  reason: string;
  message: string;
}

/**
 * Why a pending approval can no longer be decided, whoever asks: its run is terminal
 * (`workflow_stopped`, `workflow_completed`, `workflow_needs_reconciliation`) or it expired
 * (`expired_at` ≤ now). Null while it can. The decision answers 410 with it, and the views show
 * it as the refusal (`canDecide: false`), so nothing offers what the decision would refuse.
 */
export function lateRefusal(approval: { expiresAt: Date | string }, workflowState: WorkflowState, nowMs = Date.now()): LateRefusal | null {
  const ended = runEndedRefusal(workflowState);
  if (ended) return ended;
  if (new Date(approval.expiresAt).getTime() <= nowMs) return { reason: 'expired', message: 'approval expired' };
  return null;
}

/** `workflow_<state>` when the run is terminal (see {@link lateRefusal}), else null. */
export function runEndedRefusal(workflowState: WorkflowState): LateRefusal | null {
  if (!isTerminal(workflowState)) return null;
  return { reason: `workflow_${workflowState}`, message: `the workflow is ${workflowState}; nothing more will run` };
}
