import { sql, type Kysely } from 'kysely';
import { up as refundsOutsideStepsByWindow } from './20261206000697-RefundsOutsideStepsByWindow.ts';

/**
 * `refund_limit_sums` reads each candidate refund once (docs/decisions/0702-refund-sums-read-their-candidates-once.md).
 * Since 20261206000682 its candidates (the tenant's refunds on the order or of the last day) were
 * a list of action ids joined back to `actions`; the planner joined that list by hashing, with a
 * scan of every action of the ledger, so each refund decision grew with the whole history (29 ms
 * at 50,000 refunds, against 1 ms at 1,000). Now each branch of the candidates carries the
 * columns the sums need, filtered by status there, and the operation's reservation time is one
 * index lookup per candidate (a LATERAL on the operation key). Same signature, same results: the
 * same rows are counted (an action is one row whichever branch finds it), at the same time (the
 * later of its decision and its claim, ADR 0682); the outside-steps part is 20261206000697's.
 *
 * Backward compatible: a function body; `refund_limit_sums_locked` and every caller are unchanged.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION refund_limit_sums(
      p_tenant text, p_order text, p_user text, p_day_start timestamptz, p_hour_start timestamptz,
      p_statuses text[], p_exclude_action uuid
    ) RETURNS TABLE (order_cents bigint, user_24h_cents bigint, tenant_1h_cents bigint, tenant_24h_cents bigint)
    LANGUAGE sql STABLE AS $$
      WITH candidates AS (
        SELECT a.id, a.target, a.user_id, (a.arguments->>'amountCents')::bigint AS cents, a.created_at, a.operation_key
          FROM actions a
         WHERE a.tool = 'issue_refund' AND a.tenant = p_tenant
           AND (a.target = p_order OR a.created_at >= p_day_start)
           AND a.status = ANY (p_statuses)
           AND (p_exclude_action IS NULL OR a.id <> p_exclude_action)
        UNION
        SELECT a.id, a.target, a.user_id, (a.arguments->>'amountCents')::bigint, a.created_at, a.operation_key
          FROM operations o JOIN actions a ON a.operation_key = o.key
         WHERE o.tenant = p_tenant AND o.tool = 'issue_refund' AND o.created_at >= p_day_start
           AND a.tenant = p_tenant
           AND a.status = ANY (p_statuses)
           AND (p_exclude_action IS NULL OR a.id <> p_exclude_action)
      ), counted AS (
        SELECT c.target, c.user_id, c.cents,
               greatest(c.created_at, coalesce(o.created_at, c.created_at)) AS at, true AS by_agent
          FROM candidates c
          LEFT JOIN LATERAL (SELECT o.created_at FROM operations o WHERE o.key = c.operation_key) o ON true
        UNION ALL
        -- A row whose tenant is unknown is not placed in any window: it counts for its order only.
        -- Only the order's rows and the last day's can count toward a sum below.
        SELECT x.order_id, x.user_id, x.cents, CASE WHEN x.tenant IS NULL THEN NULL ELSE x.at END, x.by_agent
          FROM refunds_outside_steps(p_statuses, p_exclude_action) x
         WHERE (x.tenant = p_tenant OR (x.tenant IS NULL AND x.order_id = p_order))
           AND (x.order_id = p_order OR x.at >= p_day_start)
      )
      SELECT
        coalesce(sum(cents) FILTER (WHERE target = p_order), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE user_id = p_user AND at >= p_day_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE by_agent AND at >= p_hour_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE at >= p_day_start), 0)::bigint
      FROM counted
    $$`.execute(db);
}

/** Restores `refund_limit_sums` as 20261206000697-RefundsOutsideStepsByWindow defines it (its `up` is idempotent). */
export async function down(db: Kysely<unknown>): Promise<void> {
  await refundsOutsideStepsByWindow(db);
}
