import { sql, type Kysely } from 'kysely';

/**
 * Audit storage (docs/product/invariants.md#evidence): services write events to `audit_outbox` in the same
 * transaction as the state change; the audit service alone appends them to the hash-chained
 * `audit_log`, which the database refuses to UPDATE or DELETE; `audit_anchors` keeps signed
 * chain heads.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE audit_outbox (
      id bigserial PRIMARY KEY,
      event jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE audit_log (
      seq bigint PRIMARY KEY,
      outbox_id bigint NOT NULL UNIQUE,
      event jsonb NOT NULL,
      prev_hash text NOT NULL,
      hash text NOT NULL,
      chained_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
    END $$;
    CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
      FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
    CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
      FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

    CREATE TABLE audit_anchors (
      id bigserial PRIMARY KEY,
      seq bigint NOT NULL,
      hash text NOT NULL,
      signature text NOT NULL,
      public_key text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TRIGGER audit_anchors_no_update BEFORE UPDATE OR DELETE ON audit_anchors
      FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();

    CREATE TABLE audit_heartbeat (
      id integer PRIMARY KEY CHECK (id = 1),
      beat_at timestamptz NOT NULL
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TABLE audit_heartbeat;
    DROP TRIGGER audit_anchors_no_update ON audit_anchors;
    DROP TABLE audit_anchors;
    DROP TRIGGER audit_log_no_truncate ON audit_log;
    DROP TRIGGER audit_log_no_update ON audit_log;
    DROP TABLE audit_log;
    DROP FUNCTION audit_log_append_only();
    DROP TABLE audit_outbox;
  `.execute(db);
}
