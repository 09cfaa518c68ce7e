import { sql, type Kysely } from 'kysely';

/**
 * The model answers a run paid for and threw away (docs/decisions/0680-discarded-answers-count-toward-the-tenant-cap.md):
 * `follow_up` when a follow-up arrived while the model answered (the round is re-run with it),
 * `round_closed` when the run ended or the round was recorded by another attempt meanwhile. One
 * row each, with the answer's usage, so the tenant's daily model-spend cap (ADR 0183) sums them
 * with the recorded turns of `model_turns`. Backward compatible: a new table only, which a
 * former release neither reads nor writes (its discarded answers then stay uncounted, as before).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE IF NOT EXISTS discarded_model_answers (
      id bigserial PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      round integer NOT NULL,
      response_id text NOT NULL,
      model text NOT NULL,
      input_tokens integer NOT NULL,
      output_tokens integer NOT NULL,
      release_id text NOT NULL,
      reason text NOT NULL CHECK (reason IN ('follow_up','round_closed')),
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX IF NOT EXISTS discarded_model_answers_by_workflow ON discarded_model_answers (workflow_id)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS discarded_model_answers`.execute(db);
}
