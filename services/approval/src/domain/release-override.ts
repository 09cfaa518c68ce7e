import { RELEASE_OVERRIDE_RULE_ID } from '@gatehouse/contracts';
import { sql } from 'kysely';
import { stopRun, type Trx } from '@gatehouse/ledger';

/**
 * Ends the run of a release override that was denied or expired (docs/decisions/0230-two-person-release-changes.md):
 * `stopped` with that reason and a next step, in the caller's transaction; nothing for another
 * rule. A release override's run has no model conversation to answer, so the approval service
 * ends it itself (the release command only consumes approved ones).
 */
export async function endRefusedOverride(
  trx: Trx,
  approval: { id: string; rule_id: string; workflow_id: string; release_id: string },
  reason: 'denied' | 'approval_expired',
): Promise<void> {
  if (approval.rule_id !== RELEASE_OVERRIDE_RULE_ID) return;
  // A staged re-enable's override and a lost audit key's share the rule; their `release_id` holds
  // the tool, or `audit-key` (ADR 0230, 0717).
  const ask = await trx
    .selectFrom('approvals as p')
    .innerJoin('actions as a', 'a.id', 'p.action_id')
    .select(sql<string | null>`a.arguments->>'kind'`.as('kind'))
    .where('p.id', '=', approval.id)
    .executeTakeFirst();
  const { what, command } = overrideSubject(ask?.kind ?? null, approval.release_id);
  const nextStep = `The ${what} was ${reason === 'denied' ? 'denied' : 'not decided in time'}; ask again with ${command} if it is still needed.`;
  await stopRun(trx, { id: approval.workflow_id }, reason, nextStep, 'approval', { onlyFrom: ['awaiting_approval'] });
}

/** What an override of `kind` is about, in words, and the command that asks for it again. */
function overrideSubject(kind: string | null, subject: string): { what: string; command: string } {
  if (kind === 'reenable') return { what: `re-enable override for ${subject}`, command: `gatehouse reenable override ${subject}` };
  if (kind === 'audit_key') return { what: 'override for a lost audit key', command: 'gatehouse audit replace-lost-key' };
  return { what: `release override for ${subject}`, command: `gatehouse release override ${subject}` };
}
