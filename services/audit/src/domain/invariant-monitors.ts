import { sql } from 'kysely';
import { REMEDIATION_RULE_ID, type World } from '@gatehouse/contracts';
import { EFFECT, type Db } from '@gatehouse/ledger';
import { findTool } from '@gatehouse/tools';

type Row = { id: string };

/**
 * Authority (docs/product/invariants.md#authority): effects that ran outside the delegation of
 * the user they ran for, judged from the directory, never from the runtime's own decisions — the
 * user is unknown, lacks the tool's scope, belongs to another tenant than the run, the target
 * (order or change) is another tenant's, or a refund is above the user's refund ceiling.
 * A reconciliation remediation (`reverse_refund`, …: rule `RECON`) is not a delegated effect: its
 * authority is a lead's used approval (docs/product/reconciliation.md#remediations), so it is
 * judged only by that — one without a used approval still fires.
 * @returns operation keys of the violating effects.
 */
export async function effectsBeyondDelegation(db: Db, world: World): Promise<Row[]> {
  const rows = (
    await sql<{ id: string; tool: string; user_id: string; tenant: string; target: string; amount: string | null }>`
      select o.key as id, a.tool, w.user_id, w.tenant, a.target, a.arguments->>'amountCents' as amount
        from operations o join actions a on a.id = o.action_id join workflows w on w.id = o.workflow_id
       where o.status in ${EFFECT} and not (a.rule_id = ${REMEDIATION_RULE_ID}
         and exists (select 1 from approvals p where p.action_id = a.id and p.status = 'used'))`.execute(db)
  ).rows;
  const users = new Map(world.users.map((u) => [u.id, u]));
  const targetTenant = new Map<string, string>([
    ...world.orders.map((o) => [o.id, o.tenant] as const),
    ...world.changes.map((c) => [c.id, c.tenant] as const),
  ]);
  return rows.filter((r) => {
    const user = users.get(r.user_id);
    const scope = findTool(r.tool)?.scope;
    if (!user || !scope || !(user.scopes ?? []).includes(scope) || user.tenant !== r.tenant) return true;
    const owner = targetTenant.get(r.target);
    if (owner !== undefined && owner !== r.tenant) return true;
    return r.tool === 'issue_refund' && Number(r.amount ?? 0) > (user.refundCeiling ?? 0);
  });
}

/**
 * The process shape, before damage: in the last hour at least `minRefunds` refunds ran at the
 * auto limit (between `nearShare` × limit and the limit) while no approval was requested in that
 * hour, though approvals were requested in the day before it — approvals fell to zero while
 * refunds keep arriving just under the line (a units mistake, or a broken approval path, shows
 * this before the first refund over the limit).
 * @returns operation keys of those refunds, or none when the shape is not there.
 */
export async function refundsAtLimitWhileApprovalsStopped(
  db: Db,
  cfg: { autoApproveLimitCents: number; nearShare: number; minRefunds: number },
): Promise<Row[]> {
  const counts = await sql<{ last: string; before: string }>`select
      count(*) filter (where created_at > now() - interval '1 hour') as last,
      count(*) filter (where created_at <= now() - interval '1 hour' and created_at > now() - interval '25 hours') as before
    from approvals`.execute(db);
  const c = counts.rows[0];
  if (!c || Number(c.last) > 0 || Number(c.before) === 0) return [];
  const near = (
    await sql<Row>`select o.key as id from operations o join actions a on a.id = o.action_id
      where a.tool = 'issue_refund' and o.status in ${EFFECT} and o.created_at > now() - interval '1 hour'
        and (a.arguments->>'amountCents')::bigint between ${Math.ceil(cfg.nearShare * cfg.autoApproveLimitCents)} and ${cfg.autoApproveLimitCents}`.execute(
      db,
    )
  ).rows;
  return near.length >= cfg.minRefunds ? near : [];
}

/**
 * Audit events of `type` with `outcome` written in the last hour (chained or still in the
 * outbox), as `{id}` rows of their run or service.
 */
export async function recentAuditEvents(db: Db, type: string, outcome: string | null): Promise<Row[]> {
  const sinceMs = Date.now() - 3_600_000;
  const match = outcome === null ? sql`true` : sql`event->>'outcome' = ${outcome}`;
  return (
    await sql<Row>`select coalesce(event->>'runId', event->>'service') as id from audit_log
        where event->>'type' = ${type} and ${match} and (event->>'atMs')::bigint > ${sinceMs}
      union all select coalesce(event->>'runId', event->>'service') from audit_outbox
        where event->>'type' = ${type} and ${match} and (event->>'atMs')::bigint > ${sinceMs}`.execute(db)
  ).rows;
}
