import { sql, type Kysely } from 'kysely';

/**
 * Trace context with each audit outbox row (ADR 0020): the W3C `traceparent` of the span that
 * wrote the event, so the audit service's chaining span joins the workflow's trace. Only the
 * outbox carries it — the chained `audit_log` content (and so every hash) is unchanged.
 * Backward compatible: a nullable column.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE audit_outbox ADD COLUMN traceparent text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE audit_outbox DROP COLUMN traceparent`.execute(db);
}
