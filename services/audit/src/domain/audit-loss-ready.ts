import { AUDIT_LOSS_RELEASE, auditLossHeld, type Db } from '@gatehouse/ledger';
import { needsOperator, type ReadyCheck } from '@gatehouse/platform';

/**
 * The audit service's readiness while a lost audit tail holds consequential steps
 * (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md): rejects, naming the
 * hold's reason and the command that releases it, while the hold is raised; marked
 * `needsOperator` (only an acknowledgement clears it). A ledger that does not answer resolves
 * here: that is the ledger check's to report. One statement per probe.
 */
export function auditLossReadyCheck(db: Db): ReadyCheck {
  return needsOperator(async () => {
    const held = await auditLossHeld(db).catch(() => null);
    if (held)
      throw new Error(
        `consequential steps are held for a lost audit tail (${held}): ${AUDIT_LOSS_RELEASE} once the lost window is reconciled`,
      );
  });
}
