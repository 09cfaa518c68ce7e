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

/** An approval past `expires_at` as the sweep finds it: read without a lock, then ended in lock order. */
interface DueApproval {
  id: string;
  workflow_id: string;
  action_id: string;
}

/** The columns the sweep's UPDATEs return (see {@link ExpiredApproval}). */
const EXPIRED_COLUMNS = ['id', 'action_id', 'workflow_id', 'tool', 'action_digest', 'action_version', 'release_id', 'rule_id'] as const;

/**
 * The approvals past `expires_at` in `status`, oldest first, read without a lock: each is then
 * ended in a transaction of its own that locks its run and its action before it (ADR 0014's
 * order; {@link lockRunAndAction}). `rule` narrows them to one rule (the release overrides).
 */
function dueApprovals(db: Db, status: 'pending' | 'approved', rule?: string): Promise<DueApproval[]> {
  let q = db
    .selectFrom('approvals')
    .select(['id', 'workflow_id', 'action_id'])
    .where('status', '=', status)
    .where('expires_at', '<', new Date());
  if (rule) q = q.where('rule_id', '=', rule);
  return q.orderBy('expires_at').execute();
}

/**
 * Locks the run, then the action of a due approval, before the approval's own UPDATE: the order
 * every other writer of the three takes (workflows → actions → approvals,
 * docs/decisions/0014-row-lock-order.md). The sweep used to update the approval first, and a
 * stop of the same run (which locks the run and its actions, then voids their approvals) could
 * deadlock with it.
 */
async function lockRunAndAction(trx: Trx, due: DueApproval): Promise<void> {
  await trx.selectFrom('workflows').select('id').where('id', '=', due.workflow_id).forUpdate().execute();
  await trx.selectFrom('actions').select('id').where('id', '=', due.action_id).forUpdate().execute();
}

/**
 * The UPDATE that expires one due approval, conditional on its status still being `from` (a
 * concurrent sweep, decision or void ended it otherwise). `conditional: false` drops that
 * condition (control-removed tests only): the approval read earlier is then expired by id,
 * unconditionally — the check-then-act a concurrent sweep slips through.
 */
function expireOne(trx: Trx, due: DueApproval, from: 'pending' | 'approved', conditional = true) {
  const update = trx.updateTable('approvals').set({ status: 'expired', decided_at: new Date() }).where('id', '=', due.id);
  return (conditional ? update.where('status', '=', from).where('expires_at', '<', new Date()) : update).returning([...EXPIRED_COLUMNS]);
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
 * or reconciliation keeps alive. One transaction per override, in lock order.
 */
async function expireUnusedOverrides(db: Db): Promise<void> {
  for (const due of await dueApprovals(db, 'approved', RELEASE_OVERRIDE_RULE_ID))
    await inTransaction(db, async (trx) => {
      await lockRunAndAction(trx, due);
      const [a] = await expireOne(trx, due, 'approved').execute();
      if (!a) return;
      await auditExpiry(trx, a, 'expired_unused');
      await endRefusedOverride(trx, a, 'approval_expired');
    });
}

/**
 * Expires one due pending approval in `trx`, after locking its run and action
 * ({@link lockRunAndAction}): the approval becomes `expired` and is audited, its action is
 * denied, a release override's run is stopped, and a model call is answered
 * `{executed: false, reason: "approval_expired"}` with `stop: approval_expired` (the returned
 * `results` row, to publish after the commit). Null when there is no call to answer, or when
 * the approval was no longer pending.
 */
async function expirePending(trx: Trx, due: DueApproval, conditional: boolean): Promise<OutboxRow | null> {
  await lockRunAndAction(trx, due);
  const [a] = await expireOne(trx, due, 'pending', conditional).execute();
  if (!a) return null;
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
  if (!action || decidedOutOfBand(a.rule_id)) return null;
  const output = toSafeOutput(a.tool, { executed: false, reason: 'approval_expired' }, 'gatehouse');
  return enqueueInTransaction(trx, resultsQueue, {
    release: action.release_id, // the run's queues now (a requeue may have moved it)
    workflowId: a.workflow_id,
    callId: action.call_id,
    output,
    stop: 'approval_expired',
  });
}

/**
 * Expires pending approvals past `expires_at` (single conditional UPDATE), denies their actions
 * and answers their calls `{executed: false, reason: "approval_expired"}`, stopping the workflow
 * with `stopped(approval_expired)`. Returns how many expired.
 *
 * Every approval replica runs this sweep (docs/decisions/0195-services-as-replicas.md): the
 * condition `status = 'pending'` is re-checked by Postgres after a concurrent sweep's commit, so
 * an approval expires — and is audited and answered — once. `onlyPending: false` drops that
 * condition (control-removed tests only). Each approval is ended in a transaction of its own
 * that locks its run and action first ({@link expirePending}).
 */
export async function sweepExpiredApprovals(deps: { db: Db; relay: OutboxRelay; onlyPending?: boolean }): Promise<number> {
  await expireUnusedOverrides(deps.db);
  const rows: OutboxRow[] = [];
  for (const due of await dueApprovals(deps.db, 'pending')) {
    const row = await inTransaction(deps.db, (trx) => expirePending(trx, due, deps.onlyPending !== false));
    if (row) rows.push(row);
  }
  await deps.relay.publish(rows);
  return rows.length;
}
