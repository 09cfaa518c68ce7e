import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';
import { call } from '@gatehouse/cli';

/** States in which a workflow waits on nobody but a person or a switch (the drill may move on). */
const RESTING = sql`('completed', 'stopped', 'needs_reconciliation', 'paused')`;
/** Operation statuses that are, or may be, an effect at the payments ledger. */
const EFFECT = sql`('succeeded', 'running', 'failed_unknown')`;

/** How many workflows of the drill run `tag` are still working (not resting, not waiting only on a pending approval). */
export async function busyWorkflows(db: Db, tag: string): Promise<number> {
  const r = await sql<{ n: string }>`select count(*) as n from workflows w where w.ticket_id like ${`${tag}-%`}
    and not (w.state in ${RESTING}
      or (w.state = 'awaiting_approval'
        and exists (select 1 from approvals p where p.workflow_id = w.id and p.status = 'pending')
        and not exists (select 1 from actions a where a.workflow_id = w.id and a.status in ('approved', 'running'))))`.execute(db);
  return Number(r.rows[0]!.n);
}

/**
 * A mark of the records the monitors read: every transition, decision, switch and epoch change
 * writes an audit event (docs/product/invariants.md#evidence), so while the newest event in the
 * outbox and in the chain stay the same, a monitor pass would find what the former found.
 */
export async function recordsMark(db: Db): Promise<string> {
  const r = await sql<{ o: string | null; l: string | null }>`select (select max(id::bigint) from audit_outbox)::text as o,
    (select max(seq::bigint) from audit_log)::text as l`.execute(db);
  return `${r.rows[0]!.o}:${r.rows[0]!.l}`;
}

/** A pending approval of the run: who asked, when (real), and the tenant and region its lead must share. */
export interface PendingApproval {
  id: string;
  createdAt: Date;
  tenant: string;
  region: string | null;
  /** What names it deterministically across runs: its ticket, action version and tool. */
  ticketId: string;
  actionVersion: number;
  tool: string;
}

/** The run's pending approvals, oldest first. */
export async function pendingApprovals(db: Db, tag: string): Promise<PendingApproval[]> {
  const r = await sql<{
    id: string;
    created_at: Date;
    tenant: string;
    region: string | null;
    ticket_id: string;
    action_version: number;
    tool: string;
  }>`
    select p.id, p.created_at, p.tenant, p.region, w.ticket_id, p.action_version, p.tool from approvals p join workflows w on w.id = p.workflow_id
    where w.ticket_id like ${`${tag}-%`} and p.status = 'pending' order by p.created_at, p.id`.execute(db);
  return r.rows.map((x) => ({
    id: x.id,
    createdAt: x.created_at,
    tenant: x.tenant,
    region: x.region,
    ticketId: x.ticket_id,
    actionVersion: x.action_version,
    tool: x.tool,
  }));
}

/** One refund operation of the run, with what decided it. Amount in integer cents. */
export interface RefundOp {
  key: string;
  status: string;
  error: string | null;
  policyRevision: string;
  amountCents: number;
  dispatchedAt: Date | null;
  /** Executed (or may have) above the auto limit, cumulatively on its order, without a used approval. */
  violation: boolean;
}

/**
 * Every refund operation of the run. `violation` is ground truth by the refund's own properties —
 * the order's cumulative effects up to it above `autoLimitCents` and no used approval — the rule of
 * the monitor and of reconciliation, computed here independently.
 */
export async function refundOps(db: Db, tag: string, autoLimitCents: number): Promise<RefundOp[]> {
  const r = await sql<{
    key: string;
    status: string;
    error: string | null;
    policy_revision: string;
    amount: string;
    dispatched_at: Date | null;
    cumulative: string | null;
    used: boolean;
  }>`select o.key, o.status, o.error, a.policy_revision, a.arguments->>'amountCents' as amount, o.dispatched_at,
      case when o.status in ${EFFECT} then (select sum((a2.arguments->>'amountCents')::bigint) from operations o2
        join actions a2 on a2.id = o2.action_id where a2.tool = 'issue_refund' and a2.target = a.target
        and o2.status in ${EFFECT} and o2.created_at <= o.created_at) end as cumulative,
      exists (select 1 from approvals p where p.action_id = a.id and p.status = 'used') as used
    from operations o join actions a on a.id = o.action_id join workflows w on w.id = o.workflow_id
    where a.tool = 'issue_refund' and w.ticket_id like ${`${tag}-%`} order by o.created_at`.execute(db);
  return r.rows.map((x) => ({
    key: x.key,
    status: x.status,
    error: x.error,
    policyRevision: x.policy_revision,
    amountCents: Number(x.amount),
    dispatchedAt: x.dispatched_at,
    violation: x.cumulative !== null && Number(x.cumulative) > autoLimitCents && !x.used,
  }));
}

/** The refund proposals of the run the policy denied, by revision and rule: `{revision: {rule: n}}`. */
export async function denialsByRule(db: Db, tag: string): Promise<Record<string, Record<string, number>>> {
  const r = await sql<{ rev: string; rule: string; n: string }>`select a.policy_revision as rev, a.rule_id as rule, count(*) as n
    from actions a join workflows w on w.id = a.workflow_id
    where a.tool = 'issue_refund' and a.decision = 'DENY' and w.ticket_id like ${`${tag}-%`} group by 1, 2 order by 1, 2`.execute(db);
  const out: Record<string, Record<string, number>> = {};
  for (const x of r.rows) (out[x.rev] ??= {})[x.rule] = Number(x.n);
  return out;
}

/** The run's workflows by state: `{state: n}`. */
export async function workflowStates(db: Db, tag: string): Promise<Record<string, number>> {
  const r = await sql<{ state: string; n: string }>`select state, count(*) as n from workflows
    where ticket_id like ${`${tag}-%`} group by 1 order by 1`.execute(db);
  return Object.fromEntries(r.rows.map((x) => [x.state, Number(x.n)]));
}

/** What the payments ledger itself holds and refused, read back from staging (no token). */
export interface PaymentsRecord {
  /** Refunds paid: idempotency key → amount cents. */
  refunds: Map<string, number>;
  /** Refund requests the ledger refused with `ceiling_exceeded`, by idempotency key. */
  ceilingRefused: Set<string>;
  /** Reversals: refund idempotency key → amount cents. */
  reversed: Map<string, number>;
}

/** Reads the payments ledger's refunds, reversals and its request log's ceiling refusals. */
export async function paymentsRecord(stagingUrl: string): Promise<PaymentsRecord> {
  const refunds = (await call('GET', `${stagingUrl}/ledger/refunds`, null)).body.refunds as Array<{
    refundId: string;
    idempotencyKey: string;
    amountCents: number;
  }>;
  const reversals = (await call('GET', `${stagingUrl}/ledger/reversals`, null)).body.reversals as Array<{
    refundId: string;
    amountCents: number;
  }>;
  const requests = (await call('GET', `${stagingUrl}/requests?target=payments`, null)).body.requests as Array<{
    idempotencyKey: string | null;
    reason: string | null;
  }>;
  const keyOf = new Map(refunds.map((x) => [x.refundId, x.idempotencyKey]));
  return {
    refunds: new Map(refunds.map((x) => [x.idempotencyKey, x.amountCents])),
    ceilingRefused: new Set(requests.filter((x) => x.reason === 'ceiling_exceeded' && x.idempotencyKey).map((x) => x.idempotencyKey!)),
    reversed: new Map(reversals.map((x) => [keyOf.get(x.refundId) ?? x.refundId, x.amountCents])),
  };
}

/**
 * One line per workflow of the run whose ticket matches `ticketIds`: its release, state and stop
 * reason, and each refund action's decision, rule, status and operation outcome — what a failed
 * verdict needs to say which ticket went otherwise than planned.
 */
export async function ticketFates(db: Db, tag: string, ticketIds: string[]): Promise<string[]> {
  if (!ticketIds.length) return [];
  const r = await sql<{ line: string }>`select concat_ws(' ', w.ticket_id, w.release_id, w.state, w.stop_reason,
      (select string_agg(concat_ws(':', a.tool, a.arguments->>'amountCents', a.decision, a.rule_id, a.status, o.status, o.error), ', ' order by a.version)
        from actions a left join operations o on o.action_id = a.id where a.workflow_id = w.id)) as line
    from workflows w where w.ticket_id like ${`${tag}-%`} and w.ticket_id in (${sql.join(ticketIds)})
    order by w.created_at`.execute(db);
  return r.rows.map((x) => x.line);
}
