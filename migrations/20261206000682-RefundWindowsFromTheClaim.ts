import { sql, type Kysely } from 'kysely';

/**
 * The rolling windows of the refund limits (R5, R6, R10) place a refund that ran at its claim,
 * not at its decision (docs/decisions/0682-a-held-refund-counts-from-its-claim.md): a refund
 * decided hours ago and held (a switched-off tool, a staged re-enable) that runs now is money out
 * now. Its time in the windows is the later of its decision (`actions.created_at`) and its
 * operation's reservation at the first claim (`operations.created_at`); a refund never claimed
 * keeps its decision's time. The order's cumulative basis (R4, R7) has no window and is
 * unchanged.
 *
 * - `operations.tenant` (new, nullable): the tenant of the operation's action, filled by a
 *   `BEFORE INSERT` trigger from `actions` (so any writer, a former release's included, fills it)
 *   and backfilled here; a partial index on `(tenant, created_at)` for refund operations.
 * - `refund_limit_sums` is redefined with that time (same signature, so
 *   `refund_limit_sums_locked` and every caller are unchanged). Its candidates are the tenant's
 *   refunds on the order or decided inside the day, plus the tenant's refunds whose operation was
 *   reserved inside the day — found through that index, so a decision reads only its own
 *   tenant's rows, as before (the limit checks never scan another tenant's, ADR 0500).
 *
 * Backward compatible: a nullable column, a trigger, an index and a function body; a former
 * release calls the same function and counts held refunds from their claim too.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE operations ADD COLUMN IF NOT EXISTS tenant text`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION operations_fill_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.tenant IS NULL THEN
        SELECT a.tenant INTO NEW.tenant FROM actions a WHERE a.id = NEW.action_id;
      END IF;
      RETURN NEW;
    END $$`.execute(db);
  await sql`CREATE OR REPLACE TRIGGER operations_fill_tenant BEFORE INSERT ON operations
    FOR EACH ROW EXECUTE FUNCTION operations_fill_tenant()`.execute(db);
  await sql`UPDATE operations o SET tenant = a.tenant FROM actions a WHERE a.id = o.action_id AND o.tenant IS NULL`.execute(db);
  await sql`CREATE INDEX IF NOT EXISTS operations_refunds_by_tenant_time ON operations (tenant, created_at) WHERE tool = 'issue_refund'`.execute(
    db,
  );
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
               greatest(a.created_at, coalesce(o.created_at, a.created_at)) AS at
          FROM candidates c
          JOIN actions a ON a.id = c.id
          LEFT JOIN operations o ON o.key = a.operation_key
         WHERE a.status = ANY (p_statuses)
           AND (p_exclude_action IS NULL OR a.id <> p_exclude_action)
      )
      SELECT
        coalesce(sum(cents) FILTER (WHERE target = p_order), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE user_id = p_user AND at >= p_day_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE at >= p_hour_start), 0)::bigint,
        coalesce(sum(cents) FILTER (WHERE at >= p_day_start), 0)::bigint
      FROM counted
    $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION refund_limit_sums(
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
  await sql`DROP INDEX IF EXISTS operations_refunds_by_tenant_time`.execute(db);
  await sql`DROP TRIGGER IF EXISTS operations_fill_tenant ON operations`.execute(db);
  await sql`DROP FUNCTION IF EXISTS operations_fill_tenant()`.execute(db);
  await sql`ALTER TABLE operations DROP COLUMN IF EXISTS tenant`.execute(db);
}
