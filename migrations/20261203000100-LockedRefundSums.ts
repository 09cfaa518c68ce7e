import { sql, type Kysely } from 'kysely';

/**
 * The refund limits' sums as database functions, so that a decision can take the limits' advisory
 * locks and read the sums in one round trip (docs/decisions/0470-locked-refund-sums-in-one-statement.md):
 *
 * - `refund_limit_sums(tenant, order, user, day_start, hour_start, statuses, exclude_action)`: the
 *   one definition of the four sums a refund decision reads, integer cents — the order's cumulative
 *   basis (R4, R7), the user's rolling day (R5), the tenant's agent hour (R6) and the tenant's
 *   rolling day (R10) — over the tenant's refunds in `statuses` that are on the order or inside
 *   the day, leaving out `exclude_action` (the action re-evaluated). Which states count and where
 *   the windows start are the caller's (packages/policy/src/facts.ts owns both). STABLE: it reads
 *   with the snapshot of the query that calls it, and the planner inlines it into that query.
 * - `refund_limit_sums_locked(lock_ids, …)`: takes each transaction-scoped advisory lock of
 *   `lock_ids` in the order given (the caller sorts them: packages/ledger/src/advisory-locks.ts),
 *   then returns the same sums. It is VOLATILE PL/pgSQL, so under READ COMMITTED the sums' query
 *   takes its snapshot after the locks are granted and sees every decision that committed while
 *   this one waited — what a separate statement after the locks saw before.
 *
 * Backward compatible: functions only; a former release does not call them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION refund_limit_sums(
      p_tenant text, p_order text, p_user text, p_day_start timestamptz, p_hour_start timestamptz,
      p_statuses text[], p_exclude_action uuid
    ) RETURNS TABLE (order_cents bigint, user_24h_cents bigint, tenant_1h_cents bigint, tenant_24h_cents bigint)
    LANGUAGE sql STABLE AS $$
      SELECT
        coalesce(sum((a.arguments->>'amountCents')::bigint) FILTER (WHERE a.target = p_order), 0)::bigint,
        coalesce(sum((a.arguments->>'amountCents')::bigint) FILTER (WHERE a.user_id = p_user AND a.created_at >= p_day_start), 0)::bigint,
        coalesce(sum((a.arguments->>'amountCents')::bigint) FILTER (WHERE a.created_at >= p_hour_start), 0)::bigint,
        coalesce(sum((a.arguments->>'amountCents')::bigint) FILTER (WHERE a.created_at >= p_day_start), 0)::bigint
      FROM actions a
      WHERE a.tool = 'issue_refund'
        AND a.status = ANY (p_statuses)
        AND a.tenant = p_tenant
        AND (a.target = p_order OR a.created_at >= p_day_start)
        AND (p_exclude_action IS NULL OR a.id <> p_exclude_action)
    $$`.execute(db);
  await sql`
    CREATE FUNCTION refund_limit_sums_locked(
      p_lock_ids bigint[], p_tenant text, p_order text, p_user text, p_day_start timestamptz,
      p_hour_start timestamptz, p_statuses text[], p_exclude_action uuid
    ) RETURNS TABLE (order_cents bigint, user_24h_cents bigint, tenant_1h_cents bigint, tenant_24h_cents bigint)
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      lock_id bigint;
    BEGIN
      FOREACH lock_id IN ARRAY coalesce(p_lock_ids, '{}') LOOP
        PERFORM pg_advisory_xact_lock(lock_id);
      END LOOP;
      RETURN QUERY SELECT * FROM refund_limit_sums(p_tenant, p_order, p_user, p_day_start, p_hour_start, p_statuses, p_exclude_action);
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION refund_limit_sums_locked(bigint[], text, text, text, timestamptz, timestamptz, text[], uuid)`.execute(db);
  await sql`DROP FUNCTION refund_limit_sums(text, text, text, timestamptz, timestamptz, text[], uuid)`.execute(db);
}
