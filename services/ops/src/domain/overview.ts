import type { UnknownOperationRow, WorkflowOverview, Worklist } from '@gatehouse/contracts';
import { releaseHoldOf, shownNextStep, type Db, type WorkflowState } from '@gatehouse/ledger';

/**
 * Every workflow state (docs/product/states.md#workflow), in the order the dashboard shows them.
 * The rows and lists below have the shapes of packages/contracts/src/api/ops.ts (the ops API's document).
 */
export const WORKFLOW_STATES: readonly WorkflowState[] = [
  'received',
  'investigating',
  'awaiting_approval',
  'executing',
  'paused',
  'needs_reconciliation',
  'stopped',
  'completed',
];

/**
 * Counts workflows per state across every tenant (operators are platform-wide, like the ops
 * commands) and lists the `limit` most recently updated, optionally only those in `state`; a
 * live run of a draining or retired release shows that it is held ({@link shownNextStep}).
 */
export async function workflowOverview(db: Db, opts: { state?: WorkflowState; limit: number }): Promise<WorkflowOverview> {
  const grouped = await db
    .selectFrom('workflows')
    .select(['state', db.fn.countAll<string>().as('n')])
    .groupBy('state')
    .execute();
  const counts: Record<string, number> = Object.fromEntries(WORKFLOW_STATES.map((s) => [s, 0]));
  for (const g of grouped) counts[g.state] = Number(g.n);
  let q = db
    .selectFrom('workflows as w')
    .leftJoin('releases as r', 'r.id', 'w.release_id')
    .select(['w.id', 'w.tenant', 'w.ticket_id', 'w.pack', 'w.state', 'w.stop_reason', 'w.next_step', 'w.release_id', 'w.updated_at'])
    .select((eb) => eb.fn.coalesce('r.draining', eb.val(false)).as('draining'))
    .select('r.status as release_status')
    .orderBy('w.updated_at', 'desc')
    .orderBy('w.id')
    .limit(opts.limit);
  if (opts.state) q = q.where('w.state', '=', opts.state);
  const rows = await q.execute();
  return {
    counts,
    recent: rows.map((r) => ({
      id: r.id,
      tenant: r.tenant,
      ticketId: r.ticket_id,
      pack: r.pack,
      state: r.state,
      stopReason: r.stop_reason,
      nextStep: shownNextStep(r, releaseHoldOf({ draining: r.draining, status: r.release_status ?? '' })),
      release: r.release_id,
      updatedAt: r.updated_at.toISOString(),
    })),
  };
}

/** Every `failed_unknown` operation, oldest first (the longest-waiting need attention first), at most `limit`. */
export async function unknownOperations(db: Db, limit: number): Promise<UnknownOperationRow[]> {
  const rows = await db
    .selectFrom('operations as o')
    .innerJoin('workflows as w', 'w.id', 'o.workflow_id')
    .select(['o.key', 'o.tool', 'o.workflow_id', 'w.state', 'o.release_id', 'o.attempts', 'o.error', 'o.updated_at'])
    .where('o.status', '=', 'failed_unknown')
    .orderBy('o.updated_at')
    .orderBy('o.key')
    .limit(limit)
    .execute();
  return rows.map((r) => ({
    key: r.key,
    tool: r.tool,
    workflowId: r.workflow_id,
    workflowState: r.state,
    release: r.release_id,
    attempts: r.attempts,
    error: r.error,
    since: r.updated_at.toISOString(),
  }));
}

/**
 * The current reconciliation worklist: every live item (status `open` or `frozen`; migration
 * 20261130000400-Reconciliation), oldest first, at most `limit`. A database
 * without the table (a release older than the reconciliation migration) yields
 * `available: false` instead of an error, so the rest of the dashboard still works.
 */
export async function currentWorklist(db: Db, limit: number): Promise<Worklist> {
  try {
    const rows = await db
      .selectFrom('reconciliation_items')
      .selectAll()
      .where('status', 'in', ['open', 'frozen'])
      .orderBy('created_at')
      .orderBy('id')
      .limit(limit)
      .execute();
    return {
      available: true,
      items: rows.map((r) => ({
        id: String(r.id),
        runId: r.run_id,
        class: r.class,
        owner: r.owner,
        status: r.status,
        subject: r.subject,
        tenant: r.tenant,
        operationKey: r.operation_key,
        workflowId: r.workflow_id,
        tool: r.tool,
        orderId: r.order_id,
        amountCents: r.amount_cents === null ? null : Number(r.amount_cents),
        ledgerRef: r.ledger_ref,
        detail: r.detail,
        remediation: r.remediation,
        createdAt: r.created_at.toISOString(),
        lastSeenAt: r.last_seen_at.toISOString(),
      })),
    };
  } catch (err) {
    // 42P01 undefined_table: the reconciliation migration has not been applied to this database.
    if ((err as { code?: string }).code === '42P01')
      return { available: false, reason: 'reconciliation_items does not exist (migration not applied)', items: [] };
    throw err;
  }
}
