import { sql } from 'kysely';
import { recordAudit } from './audit.ts';
import { isTruncation, type ChainVerification } from './audit-verify.ts';
import { inTransaction, type Db, type Trx } from './db.ts';

/**
 * The audit-loss hold's one rule (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md):
 * while the audit chain is shorter than its witness — a witnessed anchor beyond the head, audit
 * rows already witnessed outside the ledger lost, the sign of a lossy ledger promote — consequential
 * steps are held until an operator acknowledges the loss. The audit monitor raises it
 * ({@link raiseAuditLossHold}); the executor reads it with the action ({@link auditLossHoldColumn});
 * `gatehouse audit acknowledge-loss` clears it. A loss at or below the acknowledged seq never holds again.
 */

/** What the executor's next step and readiness say while held: the command that releases it. */
export const AUDIT_LOSS_RELEASE = 'gatehouse audit acknowledge-loss --reason <why>';

/**
 * The hold's reason as a scalar SQL subquery (text, `truncated: the witnessed anchor at seq N is
 * beyond the head (seq H)`; null while not held), selected with other columns: the executor's
 * check costs no statement of its own.
 */
export const auditLossHoldColumn = sql<string | null>`(select h.reason from audit_loss_hold h where h.id = 1 and h.held_since is not null)`;

/** The hold's reason (see {@link auditLossHoldColumn}), or null while not held. One statement. */
export async function auditLossHeld(db: Db | Trx): Promise<string | null> {
  const row = await db.selectNoFrom([auditLossHoldColumn.as('reason')]).executeTakeFirstOrThrow();
  return row.reason;
}

/**
 * Raises the hold when `chain` (a verification against the witness) is a truncation
 * (`isTruncation`) whose witnessed seq is above the one acknowledged, unless already raised:
 * audited `audit.loss_held` (outcome `witnessed:<seq>;head:<seq>`) in the same transaction.
 * Returns whether this call raised it.
 * @throws Error from the database.
 */
export async function raiseAuditLossHold(db: Db, chain: ChainVerification): Promise<boolean> {
  if (!isTruncation(chain)) return false;
  const witnessed = chain.firstBadSeq!;
  return inTransaction(db, async (trx) => {
    const raised = await trx
      .updateTable('audit_loss_hold')
      .set({ held_since: sql`now()`, witnessed_seq: witnessed, head_seq: chain.events, reason: chain.reason })
      .where('id', '=', 1)
      .where('held_since', 'is', null)
      .where('acknowledged_seq', '<', witnessed)
      .returning('id')
      .executeTakeFirst();
    if (!raised) return false;
    await recordAudit(trx, {
      type: 'audit.loss_held',
      service: 'audit',
      runId: null,
      outcome: `witnessed:${witnessed};head:${chain.events}`,
    });
    return true;
  });
}

/**
 * Reads the hold under its row lock in `trx` (`share`: the executor pausing a run, so an
 * acknowledgement commits before or after the pause, never between its check and its write;
 * `update`: the acknowledgement). Returns the witnessed seq and reason while held, else null.
 */
export async function lockAuditLossHold(trx: Trx, mode: 'share' | 'update'): Promise<{ witnessedSeq: number; reason: string } | null> {
  const q = trx.selectFrom('audit_loss_hold').select(['held_since', 'witnessed_seq', 'reason']).where('id', '=', 1);
  const row = await (mode === 'share' ? q.forShare() : q.forUpdate()).executeTakeFirst();
  if (!row?.held_since) return null;
  return { witnessedSeq: Number(row.witnessed_seq), reason: row.reason ?? '' };
}

/**
 * Clears the hold in `trx` (the caller holds it locked, {@link lockAuditLossHold} `update`): the
 * witnessed seq becomes the acknowledged one, with who and when.
 */
export async function clearAuditLossHold(trx: Trx, witnessedSeq: number, operator: string): Promise<void> {
  await trx
    .updateTable('audit_loss_hold')
    .set({
      held_since: null,
      acknowledged_seq: sql`greatest(acknowledged_seq, ${witnessedSeq})`,
      acknowledged_by: operator,
      acknowledged_at: sql`now()`,
    })
    .where('id', '=', 1)
    .execute();
}
