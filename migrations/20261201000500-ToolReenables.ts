import { sql, type Kysely } from 'kysely';

/**
 * Staged re-enable after containment (docs/decisions/0310-staged-reenable.md): one row per stage
 * a switched-off tool goes through on its way back (`read_only` → `cohort` → `everyone`), with who
 * started it, why, the cohort, and the evidence of the stage before it (clean executions `n`,
 * failures, the bound) and the override used (`override_id`: the approval a second person gave,
 * docs/decisions/0230-two-person-release-changes.md). At most one open stage per tool. Backward
 * compatible: a new table.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE tool_reenable_stages (
      id uuid PRIMARY KEY,
      tool text NOT NULL,
      stage text NOT NULL CHECK (stage IN ('read_only', 'cohort', 'everyone')),
      cohort_tenants text[] NOT NULL DEFAULT '{}',
      cohort_users text[] NOT NULL DEFAULT '{}',
      started_at timestamptz NOT NULL DEFAULT now(),
      started_by text NOT NULL,
      reason text NOT NULL,
      evidence_n integer,
      evidence_failures integer,
      evidence_bound double precision,
      max_bound double precision,
      override_id uuid,
      ended_at timestamptz,
      CHECK (stage <> 'cohort' OR cardinality(cohort_tenants) + cardinality(cohort_users) > 0)
    );
    CREATE UNIQUE INDEX tool_reenable_stages_open ON tool_reenable_stages (tool) WHERE ended_at IS NULL;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE tool_reenable_stages`.execute(db);
}
