import { sql, type Kysely } from 'kysely';
import { up as refundsOutsideSteps } from './20261206000686-RefundsOutsideSteps.ts';

/**
 * A refund decision reads only the reconciliation refunds that can count toward one of its sums
 * (docs/decisions/0686-refunds-outside-steps-count-toward-the-limits.md, "Reading them"): those of
 * the order (its cumulative basis, R4/R7, counts them whenever they were found) and those found
 * within the last day (the user's day R5, the agent's hour R6 and the tenant's day R10 all lie
 * inside it). Before, `refund_limit_sums` read every such item of the tenant, resolved adopted
 * ones included, which only accumulate.
 *
 * - A partial index on `reconciliation_items (created_at)` for the two classes of refunds, beside
 *   `reconciliation_refunds_by_order` (20261206000686): the two predicates are one bitmap OR.
 * - `refund_limit_sums` (same signature and results) bounds its outside-steps rows by
 *   `x.order_id = p_order OR x.at >= p_day_start`. Its sums are unchanged: every FILTER of its
 *   result is on the order or on a window that starts at or after `p_day_start`.
 *
 * Backward compatible: an index and a function body.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX IF NOT EXISTS reconciliation_refunds_by_time ON reconciliation_items (created_at)
    WHERE tool = 'issue_refund' AND class IN ('ledger_entry_without_step', 'amount_mismatch')`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION refund_limit_sums(
      p_tenant text, p_order text, p_user text, p_day_start timestamptz, p_hour_start timestamptz,
      p_statuses text[], p_exclude_action uuid
    ) RETURNS TABLE (order_cents bigint, user_24h_cents bigint, tenant_1h_cents bigint, tenant_24h_cents bigint)
    LANGUAGE sql STABLE AS $$
      WITH candidates AS (
        SELECT a.id FROM actions a
         WHERE a.tool = 'issue_refund' AND a.tenant = p_tenant
           AND (a.target = p_order OR a.created_at >= p_day_start)
        UNION
        SELECT a.id FROM operations o JOIN actions a ON a.operation_key = o.key
         WHERE o.tenant = p_tenant AND o.tool = 'issue_refund' AND o.created_at >= p_day_start
           AND a.tenant = p_tenant
      ), counted AS (
        SELECT a.target, a.user_id, (a.arguments->>'amountCents')::bigint AS cents,
               greatest(a.created_at, coalesce(o.created_at, a.created_at)) AS at, true AS by_agent
          FROM candidates c
          JOIN actions a ON a.id = c.id
          LEFT JOIN operations o ON o.key = a.operation_key
         WHERE a.status = ANY (p_statuses)
           AND (p_exclude_action IS NULL OR a.id <> p_exclude_action)
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

/** Restores `refund_limit_sums` as 20261206000686-RefundsOutsideSteps defines it (its `up` is idempotent). */
export async function down(db: Kysely<unknown>): Promise<void> {
  await refundsOutsideSteps(db);
  await sql`DROP INDEX IF EXISTS reconciliation_refunds_by_time`.execute(db);
}
