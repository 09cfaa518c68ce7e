import { sql, type Kysely } from 'kysely';

/**
 * Reconciliation worklist (docs/product/reconciliation.md): one row per difference a reconciliation
 * pass found between the ledger (operations, actions, approvals) and the systems of record, with
 * its class, repair owner and status (`open` → `resolved`, `frozen` for amount mismatches,
 * `auto_resolved` for the one automatic repair). `subject` is the natural key of a difference
 * (e.g. `op:<operationKey>`, `refund:<refundId>`, `order:<orderId>`): at most one live
 * (`open`|`frozen`) item per class and subject, so re-running a pass never duplicates items.
 * Remediations a lead must approve are bound to the item by `remediation` and `approval_id`.
 * `operations.frozen_at` marks an operation an amount mismatch froze: no worker claims, retries
 * or automatically reconciles it until a lead's remediation resolves the item.
 * Backward compatible: a new table and a nullable column; a former release reads rows unchanged.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE reconciliation_items (
      id uuid PRIMARY KEY,
      run_id uuid NOT NULL,
      class text NOT NULL CHECK (class IN ('matched','agent_done_ledger_missing','amount_mismatch',
        'ledger_entry_without_step','in_flight_ledger_has_it','in_flight_ledger_lacks_it',
        'refund_over_limit_without_approval','shipment_count_mismatch')),
      owner text NOT NULL,
      status text NOT NULL CHECK (status IN ('open','resolved','frozen','auto_resolved')),
      subject text NOT NULL,
      operation_key text,
      workflow_id uuid,
      tenant text,
      tool text,
      order_id text,
      amount_cents bigint,
      ledger_ref text,
      detail jsonb NOT NULL DEFAULT '{}',
      remediation text CHECK (remediation IS NULL OR remediation IN ('ratify','reverse','cancel_shipment','adopt','replay')),
      approval_id uuid,
      resolution text,
      resolved_by text,
      last_seen_run_id uuid,
      created_at timestamptz NOT NULL DEFAULT now(),
      last_seen_at timestamptz NOT NULL DEFAULT now(),
      resolved_at timestamptz
    );
    CREATE UNIQUE INDEX reconciliation_items_one_live ON reconciliation_items (class, subject)
      WHERE status IN ('open','frozen');
    CREATE INDEX reconciliation_items_by_status ON reconciliation_items (status, created_at);
    CREATE INDEX reconciliation_items_by_operation ON reconciliation_items (operation_key) WHERE operation_key IS NOT NULL;

    ALTER TABLE operations ADD COLUMN frozen_at timestamptz;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE operations DROP COLUMN frozen_at;
    DROP TABLE reconciliation_items;
  `.execute(db);
}
