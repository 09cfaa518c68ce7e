import { sql, type Expression, type RawBuilder } from 'kysely';
import { advisoryLockId } from './advisory-locks.ts';
import type { Db, Trx } from './db.ts';
import type { ReenableStage } from './schema.ts';

type Row = { id: string };

/** Operation statuses that are (or may be) an effect in a system of record, as an SQL list. */
export const EFFECT = sql`('succeeded', 'running', 'failed_unknown')`;

/** A value or column reference inside a containment predicate. */
type Operand = Expression<unknown> | RawBuilder<unknown>;

/**
 * Tools outside the agent's catalog that perform a catalog tool's effect, and that tool: a
 * reconciliation `replay_refund` pays a refund exactly as `issue_refund` does (the same call, the
 * same key), so `issue_refund`'s containment holds it and `effect_after_switch_off` judges it as one
 * of that tool's effects (docs/decisions/0692-containment-holds-a-replayed-refund.md). An undo
 * (`reverse_refund`, `cancel_shipment`) is absent: containment never holds what undoes an effect.
 */
export const CONTAINED_AS: Readonly<Record<string, string>> = { replay_refund: 'issue_refund' };

/** The catalog tool whose containment holds `tool` ({@link CONTAINED_AS}), or null when none does. */
export function containedAs(tool: string): string | null {
  return CONTAINED_AS[tool] ?? null;
}

/** The tool whose switch governs an operation of `tool`, in SQL: its {@link CONTAINED_AS} entry, else itself. */
function governingTool(tool: Operand): RawBuilder<string> {
  const cases = Object.entries(CONTAINED_AS).map(([from, to]) => sql`when ${from} then ${to}`);
  return sql<string>`(case ${tool} ${sql.join(cases, sql` `)} else ${tool} end)`;
}

/**
 * True when an open `cohort` stage of `tool`'s staged re-enable admits a workflow of `tenant` /
 * `user` (docs/decisions/0310-staged-reenable.md) — the one exception to a switched-off tool.
 * With `at` (a timestamp), only when that stage had started by then.
 */
export function cohortAdmits(tool: Operand, tenant: Operand, user: Operand, at?: Operand): RawBuilder<boolean> {
  const since = at ? sql`and r.started_at <= ${at}` : sql``;
  return sql<boolean>`exists (select 1 from tool_reenable_stages r where r.tool = ${tool} and r.ended_at is null
    and r.stage = 'cohort' and (${tenant} = any(r.cohort_tenants) or ${user} = any(r.cohort_users)) ${since})`;
}

/**
 * True when containment holds `tool` for a workflow of `tenant` / `user`: its switch is off and
 * no open cohort stage admits the workflow (docs/product/invariants.md#containment). The rule the
 * transition guards, the resume path and the executor's containment step share.
 */
export function heldByContainment(tool: Operand, tenant: Operand, user: Operand): RawBuilder<boolean> {
  return sql<boolean>`(exists (select 1 from tool_switches s where s.tool = ${tool} and s.enabled = false)
    and not ${cohortAdmits(tool, tenant, user)})`;
}

/**
 * Serializes a tool's containment with the claims it must stop
 * (docs/decisions/0683-switch-off-serializes-with-the-claim.md): a transaction that changes the
 * tool's switch takes it `exclusive` before it writes; the executor's claim takes it `share` as its
 * first statement, before any row lock, and reads the switch after it. A switch-off committed
 * before a claim then holds that claim's step, and one made while a claim is under way waits for
 * the claim's commit. A transaction-scoped advisory lock (no row to lock before a tool's first switch).
 */
export async function lockContainment(trx: Trx, tool: string, mode: 'share' | 'exclusive'): Promise<void> {
  const id = advisoryLockId(`containment:${tool}`);
  await (
    mode === 'share' ? sql`select pg_advisory_xact_lock_shared(${id}::bigint)` : sql`select pg_advisory_xact_lock(${id}::bigint)`
  ).execute(trx);
}

/** The open stage of a tool's staged re-enable (null: none). */
export interface OpenReenableStage {
  id: string;
  tool: string;
  stage: ReenableStage;
  cohortTenants: string[];
  cohortUsers: string[];
  startedAt: Date;
  startedBy: string;
  reason: string;
}

/** The open stage of `tool`'s staged re-enable, or of every tool when `tool` is omitted. */
export async function openReenableStages(db: Db | Trx, tool?: string): Promise<OpenReenableStage[]> {
  let q = db.selectFrom('tool_reenable_stages').selectAll().where('ended_at', 'is', null);
  if (tool) q = q.where('tool', '=', tool);
  const rows = await q.orderBy('tool').execute();
  return rows.map((r) => ({
    id: r.id,
    tool: r.tool,
    stage: r.stage,
    cohortTenants: r.cohort_tenants,
    cohortUsers: r.cohort_users,
    startedAt: new Date(r.started_at),
    startedBy: r.started_by,
    reason: r.reason,
  }));
}

/**
 * Ends `tool`'s open re-enable stage (a switch-off contains the tool again: the stages start over).
 * @returns the stage that was open, or null.
 */
export async function endOpenReenableStage(trx: Trx, tool: string): Promise<ReenableStage | null> {
  const row = await trx
    .updateTable('tool_reenable_stages')
    .set({ ended_at: new Date() })
    .where('tool', '=', tool)
    .where('ended_at', 'is', null)
    .returning('stage')
    .executeTakeFirst();
  return row?.stage ?? null;
}

/**
 * Containment (docs/product/invariants.md#containment): effects dispatched after their tool — or
 * the tool whose effect they perform ({@link CONTAINED_AS}: a reconciliation replay) — was
 * switched off (and while it is still off) — the switch is checked at the moment of execution,
 * so there must be none — except the effects of workflows an open cohort stage of the tool's
 * staged re-enable admitted, dispatched after that stage started (docs/decisions/0310-staged-reenable.md).
 * @returns operation keys.
 */
export async function effectsAfterSwitchOff(db: Db): Promise<Row[]> {
  const tool = governingTool(sql.ref('o.tool'));
  const admitted = cohortAdmits(tool, sql.ref('w.tenant'), sql.ref('w.user_id'), sql.ref('o.dispatched_at'));
  return (
    await sql<Row>`select o.key as id from operations o join tool_switches s on s.tool = ${tool} join workflows w on w.id = o.workflow_id
      where s.enabled = false and o.dispatched_at > s.changed_at and o.status in ${EFFECT} and not ${admitted}`.execute(db)
  ).rows;
}

/**
 * Containment, epoch half (docs/product/invariants.md#containment): effects whose delegated token
 * carried a revocation epoch (`operations.token_epoch`, recorded with the write-ahead mark) below
 * the epoch in force when they were dispatched — an `epoch bump` revokes every outstanding token,
 * and the systems of record must refuse them, so there must be none. The epoch in force at a time
 * is the highest of the `epoch.bumped` audit events (outcome = the new epoch) at or before it and
 * of `credential_epochs` when it last changed at or before it. Operations without a recorded
 * epoch (dispatched before it was recorded) are not judged.
 * @returns operation keys.
 */
export async function effectsWithRevokedEpoch(db: Db): Promise<Row[]> {
  return (
    await sql<Row>`with bumps as (
        select (event->>'outcome')::int as epoch, (event->>'atMs')::bigint as at_ms from audit_log
          where event->>'type' = 'epoch.bumped' and event->>'outcome' ~ '^[0-9]{1,9}$'
        union all select (event->>'outcome')::int, (event->>'atMs')::bigint from audit_outbox
          where event->>'type' = 'epoch.bumped' and event->>'outcome' ~ '^[0-9]{1,9}$'
        union all select epoch, (extract(epoch from changed_at) * 1000)::bigint from credential_epochs where id = 1)
      select o.key as id from operations o
       where o.token_epoch is not null and o.dispatched_at is not null and o.status in ${EFFECT}
         and o.token_epoch < (select max(b.epoch) from bumps b where b.at_ms <= (extract(epoch from o.dispatched_at) * 1000)::bigint)`.execute(
      db,
    )
  ).rows;
}
