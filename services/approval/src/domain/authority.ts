import { loadWorld } from '@gatehouse/contracts';
import { ForbiddenError } from '@gatehouse/platform';

/** The approval fields authority depends on. Amount in integer cents. */
export interface ApprovalSubject {
  tenant: string;
  region: string | null;
  requester: string;
  amountCents: number | null;
}

/**
 * Why `approverId` may not decide `approval`, or null when they may (SPEC §3 "Approvals"):
 * the requester can never approve; the approver must be a `lead` of the requester's tenant and
 * region whose approve limit covers the amount.
 */
export function authorityRefusal(approverId: string, tenant: string, approval: ApprovalSubject): string | null {
  const approver = loadWorld().users.find((u) => u.id === approverId && u.tenant === tenant);
  if (!approver) return 'unknown_approver';
  if (approver.id === approval.requester) return 'requester_cannot_approve';
  if (approver.role !== 'lead') return 'not_a_lead';
  if (approver.tenant !== approval.tenant) return 'wrong_tenant';
  if (!approval.region || approver.region !== approval.region) return 'wrong_region';
  if (approval.amountCents !== null && (approver.approveLimit ?? 0) < approval.amountCents) return 'approve_limit_too_low';
  return null;
}

/** @throws ForbiddenError (403) with the refusal reason when the approver lacks authority. */
export function assertAuthority(approverId: string, tenant: string, approval: ApprovalSubject): void {
  const refusal = authorityRefusal(approverId, tenant, approval);
  if (refusal) throw new ForbiddenError(refusal, `not authorized to decide this approval: ${refusal}`);
}
