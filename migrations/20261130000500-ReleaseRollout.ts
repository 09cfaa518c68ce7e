import { sql, type Kysely } from 'kysely';

/**
 * Release rollout (docs/product/releases.md): a candidate release serves a cohort (tenants and users) with
 * consequential writes disabled until enabled; a release's queues can be drained; candidate
 * jobs that no release will run are quarantined into the ledger (payload kept, never dropped).
 * Backward compatible: new columns are nullable or defaulted, the new table is separate.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE releases ADD COLUMN cohort jsonb;
    ALTER TABLE releases ADD COLUMN draining boolean NOT NULL DEFAULT false;
    ALTER TABLE releases ADD COLUMN forced boolean NOT NULL DEFAULT false;
    CREATE UNIQUE INDEX releases_one_active ON releases ((status)) WHERE status = 'active';

    CREATE TABLE quarantined_jobs (
      id bigserial PRIMARY KEY,
      queue text NOT NULL,
      job_id text NOT NULL,
      release_id text NOT NULL,
      workflow_id uuid,
      payload jsonb NOT NULL,
      reason text NOT NULL,
      quarantined_by text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (queue, job_id)
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TABLE quarantined_jobs;
    DROP INDEX releases_one_active;
    ALTER TABLE releases DROP COLUMN forced;
    ALTER TABLE releases DROP COLUMN draining;
    ALTER TABLE releases DROP COLUMN cohort;
  `.execute(db);
}
