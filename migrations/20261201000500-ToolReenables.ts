import { sql, type Kysely } from 'kysely';

/**
 * Staged re-enable after containment (docs/decisions/0310-staged-reenable.md): one row per stage
 * a switched-off tool goes through on its way back (`read_only` → `cohort` → `everyone`), with who
 * started it, why, the cohort, and the evidence of the stage before it (clean executions `n`,
 * failures, the bound). At most one open stage per tool. Release overrides gain the kind
 * `reenable` (a second operator's approval of advancing with less evidence; `release_id` then
 * holds the tool). Backward compatible: a new table and a wider CHECK.
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
    ALTER TABLE release_overrides DROP CONSTRAINT release_overrides_kind_check;
    ALTER TABLE release_overrides ADD CONSTRAINT release_overrides_kind_check
      CHECK (kind IN ('canary', 'force_gate', 'raise_limits', 'reenable'));
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DELETE FROM release_overrides WHERE kind = 'reenable';
    ALTER TABLE release_overrides DROP CONSTRAINT release_overrides_kind_check;
    ALTER TABLE release_overrides ADD CONSTRAINT release_overrides_kind_check
      CHECK (kind IN ('canary', 'force_gate', 'raise_limits'));
    DROP TABLE tool_reenable_stages;
  `.execute(db);
}
