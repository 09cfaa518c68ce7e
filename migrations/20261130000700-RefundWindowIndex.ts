import { sql, type Kysely } from 'kysely';

/**
 * An index for the cumulative refund basis (docs/product/policy-rules.md#r5 and #r6): the rolling 24 h per-user and 1 h
 * agent-wide sums filter `actions` on `tool = 'issue_refund'` and `created_at >= now - window`,
 * which `actions_by_target (tool, target)` cannot serve. Read by `recordedRefundsCents` under the
 * refund-decision lock, so its cost is paid by every refund decision (the policy benchmark).
 * Backward compatible: an index only.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX actions_by_tool_time ON actions (tool, created_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX actions_by_tool_time`.execute(db);
}
