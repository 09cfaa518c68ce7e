import { sql, type Kysely } from 'kysely';
import { up as refundWindowsFromTheClaim } from './20261206000682-RefundWindowsFromTheClaim.ts';

/**
 * The refund limits count the money reconciliation found out of the payments ledger, not only the
 * agent's own refunds (docs/decisions/0686-refunds-outside-steps-count-toward-the-limits.md).
 *
 * - `refunds_outside_steps(p_statuses, p_exclude_action)` (new): one row per refund a
 *   reconciliation item holds as money out that the agent's counted actions do not already carry —
 *   a `ledger_entry_without_step` that is live or was adopted, an `amount_mismatch` that is live or
 *   was ratified. `cents` is the ledger's amount less the agent's amount when the step's action is
 *   counted (status in `p_statuses`, not `p_exclude_action`), never below zero: an adopted refund
 *   with no step counts whole, a refund under a failed step counts whole until its step is
 *   counted, a ratified mismatch adds what the ledger moved beyond the agent's amount. `at` is when
 *   reconciliation first recorded it (`created_at`, never earlier than the refund), `user_id` and
 *   `by_agent` come from the step (null / false without one), `tenant` from the item or the step.
 *   The step is the item's operation, or the operation the ledger's idempotency key names (one
 *   reserved after the pass read the steps): a refund an agent's counted action carries is never
 *   counted twice.
 * - `refund_limit_sums` (same signature, so `refund_limit_sums_locked` and every caller are
 *   unchanged) adds those rows: to the order's basis (R4, R7), the user's day (R5, rows with a
 *   step), the tenant's day (R10); the agent's hour (R6) only rows of the agent's own steps. A row
 *   whose tenant is unknown (an order outside the directory, no step) counts for its order only.
 * - A partial index on `reconciliation_items (order_id)` for those two classes of refunds.
 *
 * Backward compatible: a function, an index and a function body; a former release calls the same
 * `refund_limit_sums` and counts these refunds too.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX IF NOT EXISTS reconciliation_refunds_by_order ON reconciliation_items (order_id)
    WHERE tool = 'issue_refund' AND class IN ('ledger_entry_without_step', 'amount_mismatch')`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION refunds_outside_steps(p_statuses text[], p_exclude_action uuid)
    RETURNS TABLE (order_id text, tenant text, user_id text, cents bigint, at timestamptz, by_agent boolean)
    LANGUAGE sql STABLE AS $$
      SELECT r.order_id, coalesce(r.tenant, a.tenant), a.user_id,
             greatest(r.amount_cents::bigint - CASE
               WHEN a.status = ANY (p_statuses) AND a.id IS DISTINCT FROM p_exclude_action
               THEN coalesce((a.arguments->>'amountCents')::bigint, 0) ELSE 0 END, 0)::bigint,
             r.created_at, a.id IS NOT NULL
        FROM reconciliation_items r
        -- The step: the item's, or the one the ledger's key names (an operation reserved after the pass read the ledger's steps).
        LEFT JOIN operations o ON o.key = coalesce(r.operation_key, r.detail->>'idempotencyKey')
        LEFT JOIN actions a ON a.id = o.action_id AND a.tool = 'issue_refund'
       WHERE r.tool = 'issue_refund'
         AND r.class IN ('ledger_entry_without_step', 'amount_mismatch')
         AND r.amount_cents IS NOT NULL
         AND (r.status IN ('open', 'frozen')
              OR (r.status = 'resolved'
                  AND r.remediation = CASE r.class WHEN 'ledger_entry_without_step' THEN 'adopt' ELSE 'ratify' END))
    $$`.execute(db);
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
        SELECT x.order_id, x.user_id, x.cents, CASE WHEN x.tenant IS NULL THEN NULL ELSE x.at END, x.by_agent
          FROM refunds_outside_steps(p_statuses, p_exclude_action) x
         WHERE x.tenant = p_tenant OR (x.tenant IS NULL AND x.order_id = p_order)
      )
      SELECT
        coalesce(sum(cents) FILTER (WHERE target = p_order), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE user_id = p_user AND at >= p_day_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE by_agent AND at >= p_hour_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE at >= p_day_start), 0)::bigint
      FROM counted
    $$`.execute(db);
}

/** Restores `refund_limit_sums` as 20261206000682-RefundWindowsFromTheClaim defines it (its `up` is idempotent). */
export async function down(db: Kysely<unknown>): Promise<void> {
  await refundWindowsFromTheClaim(db);
  await sql`DROP FUNCTION IF EXISTS refunds_outside_steps(text[], uuid)`.execute(db);
  await sql`DROP INDEX IF EXISTS reconciliation_refunds_by_order`.execute(db);
}
