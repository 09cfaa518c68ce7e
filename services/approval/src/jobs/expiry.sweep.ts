import { decidedOutOfBand, RELEASE_OVERRIDE_RULE_ID, resultsQueue } from '@gatehouse/contracts';
import {
  enqueueInTransaction,
  inTransaction,
  recordAudit,
  transitionAction,
  type ApprovalsTable,
  type Db,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import type { Selectable } from 'kysely';
import type { OutboxRelay } from '@gatehouse/platform';
import { toSafeOutput } from '@gatehouse/tools';
import { endRefusedOverride } from '../domain/release-override.ts';

/**
 * The UPDATE that expires pending approvals past `expires_at`, conditional on `status = 'pending'`.
 * Without `onlyPending` (control removed): the pending ones are read first and then updated by id,
 * unconditionally — the check-then-act a concurrent sweep slips through.
 */
async function dueApprovals(trx: Trx, onlyPending: boolean) {
  const update = trx.updateTable('approvals').set({ status: 'expired', decided_at: new Date() });
  if (onlyPending) return update.where('status', '=', 'pending').where('expires_at', '<', new Date());
  const seen = await trx
    .selectFrom('approvals')
    .select('id')
    .where('status', '=', 'pending')
    .where('expires_at', '<', new Date())
    .execute();
  return update.where('id', 'in', seen.length ? seen.map((a) => a.id) : ['00000000-0000-4000-8000-000000000000']);
}

/** The expired approval row as the sweep's UPDATEs return it. */
type ExpiredApproval = Pick<
  Selectable<ApprovalsTable>,
  'id' | 'workflow_id' | 'tool' | 'action_digest' | 'action_version' | 'release_id' | 'rule_id'
>;

/** Audits an approval the sweep expired (`approval.decided`): `expired` while pending, `expired_unused` once approved and never used. */
async function auditExpiry(trx: Trx, a: ExpiredApproval, outcome: 'expired' | 'expired_unused'): Promise<void> {
  await recordAudit(trx, {
    type: 'approval.decided',
    service: 'approval',
    runId: a.workflow_id,
    tool: a.tool,
    actionDigest: a.action_digest,
    actionVersion: a.action_version,
    approvalId: a.id,
    outcome,
    revisions: { release: a.release_id },
  });
}

/**
 * Ends release overrides that were approved and never used before `expires_at`
 * (docs/decisions/0230-two-person-release-changes.md): the approval becomes `expired` (one
 * conditional UPDATE, so each replica's sweep ends it once), audited, and its run is stopped with
 * `approval_expired` and a next step instead of waiting on a person forever. Only release
 * overrides: every other approved approval is consumed by a job or a command that the watchdog
 * or reconciliation keeps alive.
 */
async function expireUnusedOverrides(trx: Trx): Promise<void> {
  const unused = await trx
    .updateTable('approvals')
    .set({ status: 'expired', decided_at: new Date() })
    .where('status', '=', 'approved')
    .where('rule_id', '=', RELEASE_OVERRIDE_RULE_ID)
    .where('expires_at', '<', new Date())
    .returning(['id', 'workflow_id', 'tool', 'action_digest', 'action_version', 'release_id', 'rule_id'])
    .execute();
  for (const a of unused) {
    await auditExpiry(trx, a, 'expired_unused');
    await endRefusedOverride(trx, a, 'approval_expired');
  }
}

/**
 * Expires pending approvals past `expires_at` (single conditional UPDATE), denies their actions
 * and answers their calls `{executed: false, reason: "approval_expired"}`, stopping the workflow
 * with `stopped(approval_expired)`. Returns how many expired.
 *
 * Every approval replica runs this sweep (docs/decisions/0195-services-as-replicas.md): the
 * condition `status = 'pending'` is re-checked by Postgres after a concurrent sweep's commit, so
 * an approval expires — and is audited and answered — once. `onlyPending: false` drops that
 * condition (control-removed tests only).
 */
export async function sweepExpiredApprovals(deps: { db: Db; relay: OutboxRelay; onlyPending?: boolean }): Promise<number> {
  const rows = await inTransaction(deps.db, async (trx) => {
    await expireUnusedOverrides(trx);
    const due = await dueApprovals(trx, deps.onlyPending !== false);
    const expired = await due
      .returning(['id', 'action_id', 'workflow_id', 'tool', 'action_digest', 'action_version', 'release_id', 'rule_id'])
      .execute();
    const out: OutboxRow[] = [];
    for (const a of expired) {
      const denied = await transitionAction(trx, a.action_id, { to: 'denied', onlyFrom: ['pending_approval'] });
      const action = denied
        ? await trx
            .selectFrom('actions as ac')
            .innerJoin('workflows as w', 'w.id', 'ac.workflow_id')
            .select(['ac.call_id', 'w.release_id'])
            .where('ac.id', '=', a.action_id)
            .executeTakeFirstOrThrow()
        : undefined;
      await auditExpiry(trx, a, 'expired');
      // A remediation's call belongs to no model conversation: the reconciliation job reopens its
      // item; a release override's run ends here (ADR 0230).
      if (denied) await endRefusedOverride(trx, a, 'approval_expired');
      if (!action || decidedOutOfBand(a.rule_id)) continue;
      const output = toSafeOutput(a.tool, { executed: false, reason: 'approval_expired' }, 'gatehouse');
      out.push(
        await enqueueInTransaction(trx, resultsQueue, {
          release: action.release_id, // the run's queues now (a requeue may have moved it)
          workflowId: a.workflow_id,
          callId: action.call_id,
          output,
          stop: 'approval_expired',
        }),
      );
    }
    return out;
  });
  await deps.relay.publish(rows);
  return rows.length;
}
