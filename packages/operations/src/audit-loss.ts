import { Refused } from '@gatehouse/contracts';
import { actorHash, clearAuditLossHold, inTransaction, lockAuditLossHold, recordAudit, type Db, type OutboxRow } from '@gatehouse/ledger';
import { releaseUnheld } from './ops.ts';

/** `audit acknowledge-loss` refused: no audit-loss hold is raised (nothing to acknowledge). The CLI exits 1. */
export class NoAuditLossHeld extends Refused {
  constructor() {
    super('no_audit_loss_held', 'no audit-loss hold is raised: nothing is held for a lost audit tail, nothing was changed');
  }
}

/** What {@link acknowledgeAuditLoss} did: the witnessed seq accepted as lost, the loss's reason, and the rows to publish. */
export interface AuditLossAcknowledgement {
  witnessedSeq: number;
  reason: string;
  rows: OutboxRow[];
}

/**
 * `gatehouse audit acknowledge-loss --reason <why>` (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md):
 * an operator accepts that the ledger lost audit rows already witnessed outside it (after reading
 * the systems of record for the lost window, ADR 0775). In one transaction, under the hold's row
 * lock: the hold is cleared (its witnessed seq acknowledged, so the same loss never holds again),
 * audited `audit.loss_acknowledged` (outcome `witnessed:<seq>;released:<n>;reason:<why>`), and the
 * approved, unclaimed steps of paused runs that containment does not hold are re-enqueued, their
 * runs resumed (`run.resumed`, outcome `audit_loss_acknowledged`). The caller publishes the rows.
 * @throws NoAuditLossHeld when no hold is raised (nothing written).
 */
export async function acknowledgeAuditLoss(
  db: Db,
  input: { operator: string; reason: string; hmacKey: string },
): Promise<AuditLossAcknowledgement> {
  return inTransaction(db, async (trx) => {
    const hold = await lockAuditLossHold(trx, 'update');
    if (!hold) throw new NoAuditLossHeld();
    await clearAuditLossHold(trx, hold.witnessedSeq, input.operator);
    const rows = await releaseUnheld(trx, { pausedRuns: true }, { tool: null, outcome: 'audit_loss_acknowledged' });
    await recordAudit(trx, {
      type: 'audit.loss_acknowledged',
      service: 'cli',
      runId: null,
      actorHash: actorHash(input.hmacKey, input.operator),
      outcome: `witnessed:${hold.witnessedSeq};released:${rows.length};reason:${input.reason}`,
    });
    return { witnessedSeq: hold.witnessedSeq, reason: hold.reason, rows };
  });
}
