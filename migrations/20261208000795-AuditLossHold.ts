import { sql, type Kysely } from 'kysely';

/**
 * The audit-loss hold (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md):
 * one row saying whether consequential steps are held because the audit chain is shorter than its
 * witness (a witnessed anchor beyond the head: the ledger lost audit rows already witnessed outside
 * it), since when, the witnessed seq and head the monitor saw, and the highest witnessed seq an
 * operator has acknowledged as lost (a loss at or below it never holds again). The audit monitor
 * raises it; `gatehouse audit acknowledge-loss` clears it. A new table only: a former release
 * never reads it (backward compatible).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE audit_loss_hold (
      id smallint PRIMARY KEY CHECK (id = 1),
      held_since timestamptz,
      witnessed_seq bigint,
      head_seq bigint,
      reason text,
      acknowledged_seq bigint NOT NULL DEFAULT 0,
      acknowledged_by text,
      acknowledged_at timestamptz
    )`.execute(db);
  await sql`INSERT INTO audit_loss_hold (id) VALUES (1)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE audit_loss_hold`.execute(db);
}
