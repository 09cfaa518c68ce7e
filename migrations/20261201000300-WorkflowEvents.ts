import { sql, type Kysely } from 'kysely';

/**
 * Pushed updates (docs/decisions/0250-pushed-workflow-events.md): every workflow transition
 * writes one `workflow_events` row in its own transaction, numbered per workflow by
 * `workflows.event_seq` (the SSE `id:` and the webhook event's order), and one
 * `webhook_deliveries` row per active endpoint of the workflow's tenant (an outbox). An insert
 * into `workflow_events` notifies channel `gatehouse_workflow_events` with `<workflowId>:<seq>`
 * (delivered at commit), so any intake replica holding a stream hears it. Backward compatible:
 * a column with a default and new tables only.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE workflows ADD COLUMN event_seq integer NOT NULL DEFAULT 0;

    CREATE TABLE workflow_events (
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      seq integer NOT NULL CHECK (seq > 0),
      tenant text NOT NULL,
      state text NOT NULL,
      payload jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow_id, seq)
    );

    CREATE FUNCTION notify_workflow_event() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('gatehouse_workflow_events', NEW.workflow_id::text || ':' || NEW.seq::text);
      RETURN NULL;
    END $$;
    CREATE TRIGGER workflow_events_notify AFTER INSERT ON workflow_events
      FOR EACH ROW EXECUTE FUNCTION notify_workflow_event();

    CREATE TABLE webhook_endpoints (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      tenant text NOT NULL,
      url text NOT NULL,
      secret text NOT NULL,
      created_by text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      disabled_at timestamptz
    );
    CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant) WHERE disabled_at IS NULL;

    CREATE TABLE webhook_deliveries (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      endpoint_id uuid NOT NULL REFERENCES webhook_endpoints(id),
      tenant text NOT NULL,
      workflow_id uuid NOT NULL,
      event_seq integer NOT NULL,
      body text NOT NULL,
      status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
      attempts integer NOT NULL DEFAULT 0,
      next_attempt_at timestamptz NOT NULL DEFAULT now(),
      last_error text,
      created_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      UNIQUE (endpoint_id, workflow_id, event_seq),
      FOREIGN KEY (workflow_id, event_seq) REFERENCES workflow_events (workflow_id, seq)
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
    CREATE INDEX webhook_deliveries_by_status ON webhook_deliveries (tenant, status, created_at);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TABLE webhook_deliveries, webhook_endpoints, workflow_events;
    DROP FUNCTION notify_workflow_event();
    ALTER TABLE workflows DROP COLUMN event_seq;
  `.execute(db);
}
