import { sql, type Kysely } from 'kysely';

/**
 * The change pack (docs/product/users-and-tools.md#change-pack): `change_plans` holds the local draft plans `prepare_change` writes
 * (no external state; idempotent by operation key); proposals record the workflow state their
 * tools were offered in (state-gated tools are judged against it); approvals record who may
 * decide them (role, same-region) from the bundle of their pack. Backward compatible: new
 * columns are nullable or defaulted, so a former release reads rows this one creates.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE change_plans (
      id text PRIMARY KEY CHECK (id ~ '^plan_[a-z0-9]{16}$'),
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      operation_key text NOT NULL UNIQUE,
      tenant text NOT NULL,
      change_id text NOT NULL,
      "window" text NOT NULL CHECK ("window" IN ('next-maintenance-window','manual-window')),
      note text CHECK (note IS NULL OR char_length(note) <= 240),
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX change_plans_workflow ON change_plans (workflow_id);

    ALTER TABLE proposals ADD COLUMN offered_in_state text;
    ALTER TABLE approvals ADD COLUMN approver_role text NOT NULL DEFAULT 'lead';
    ALTER TABLE approvals ADD COLUMN same_region boolean NOT NULL DEFAULT true;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE approvals DROP COLUMN same_region;
    ALTER TABLE approvals DROP COLUMN approver_role;
    ALTER TABLE proposals DROP COLUMN offered_in_state;
    DROP TABLE change_plans;
  `.execute(db);
}
