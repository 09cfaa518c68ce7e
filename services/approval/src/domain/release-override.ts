import { RELEASE_OVERRIDE_RULE_ID } from '@gatehouse/contracts';
import { transitionWorkflow, type Trx } from '@gatehouse/ledger';

/**
 * Ends the run of a release override that was denied or expired (docs/decisions/0230-two-person-release-changes.md):
 * `stopped` with that reason and a next step, in the caller's transaction; nothing for another
 * rule. A release override's run has no model conversation to answer, so the approval service
 * ends it itself (the release command only consumes approved ones).
 */
export async function endRefusedOverride(
  trx: Trx,
  approval: { rule_id: string; workflow_id: string; release_id: string },
  reason: 'denied' | 'approval_expired',
): Promise<void> {
  if (approval.rule_id !== RELEASE_OVERRIDE_RULE_ID) return;
  const nextStep = `The release override for ${approval.release_id} was ${reason === 'denied' ? 'denied' : 'not decided in time'}; ask again with gatehouse release override ${approval.release_id} if it is still needed.`;
  await transitionWorkflow(trx, approval.workflow_id, { to: 'stopped', stopReason: reason, nextStep, onlyFrom: ['awaiting_approval'] });
}
