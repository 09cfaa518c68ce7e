import { sql, type Kysely } from 'kysely';

/**
 * The Gatehouse ledger (docs/product/design.md#ledger-tables): workflows, model turns, proposals, actions,
 * approvals, operations (the idempotency ledger), switches, epochs, budgets, outbox, decision log,
 * releases and the conversation transcript the agent loop resends (stateless Responses API).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE releases (
      id text PRIMARY KEY,
      manifest jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('candidate','active','retired')),
      writes_enabled boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      activated_at timestamptz
    );

    CREATE TABLE workflows (
      id uuid PRIMARY KEY,
      tenant text NOT NULL,
      ticket_id text NOT NULL,
      user_id text NOT NULL,
      pack text NOT NULL CHECK (pack IN ('support','change')),
      mode text NOT NULL CHECK (mode IN ('investigate','act')),
      text_sha256 text NOT NULL,
      state text NOT NULL,
      stop_reason text,
      next_step text,
      release_id text NOT NULL,
      policy_revision text NOT NULL,
      catalog_digest text NOT NULL,
      round integer NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (tenant, ticket_id)
    );

    CREATE TABLE budgets (
      workflow_id uuid PRIMARY KEY REFERENCES workflows(id),
      max_rounds integer NOT NULL,
      max_tool_calls integer NOT NULL,
      deadline_at timestamptz NOT NULL,
      max_spend_micro_usd integer NOT NULL,
      rounds_used integer NOT NULL DEFAULT 0,
      tool_calls_used integer NOT NULL DEFAULT 0,
      tokens_used integer NOT NULL DEFAULT 0,
      spend_micro_usd integer NOT NULL DEFAULT 0,
      -- No-progress detection: failed validations in a row (three stop the run).
      consecutive_invalid integer NOT NULL DEFAULT 0
    );

    -- The transcript resent to the model each round (stateless Responses API; store: false).
    -- Holds the ticket text and follow-ups, the function_call items as returned, and the
    -- model-safe function_call_output of each call. One output per call_id, enforced here.
    CREATE TABLE conversation_items (
      id bigserial PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      round integer NOT NULL,
      kind text NOT NULL CHECK (kind IN ('user_message','assistant_message','function_call','function_call_output')),
      call_id text,
      item jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX conversation_items_call_once ON conversation_items (workflow_id, kind, call_id) WHERE call_id IS NOT NULL;
    CREATE INDEX conversation_items_by_workflow ON conversation_items (workflow_id, id);

    CREATE TABLE model_turns (
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      round integer NOT NULL,
      response_id text NOT NULL,
      model text NOT NULL,
      input_sha256 text NOT NULL,
      input_tokens integer NOT NULL,
      output_tokens integer NOT NULL,
      function_calls integer NOT NULL,
      release_id text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (workflow_id, round)
    );

    CREATE TABLE proposals (
      id uuid PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      round integer NOT NULL,
      call_id text NOT NULL,
      tool text NOT NULL,
      arguments_sha256 text NOT NULL,
      status text NOT NULL CHECK (status IN ('received','valid','invalid')),
      validation_error jsonb,
      created_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (workflow_id, call_id)
    );

    -- One row per action version. version is workflow-scoped and strictly increasing, so the
    -- idempotency key <workflowId>:action:<version> is unique per effect (docs/decisions).
    CREATE TABLE actions (
      id uuid PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      proposal_id uuid NOT NULL REFERENCES proposals(id),
      call_id text NOT NULL,
      version integer NOT NULL,
      supersedes_version integer,
      tool text NOT NULL,
      target text NOT NULL,
      arguments jsonb NOT NULL,
      digest text NOT NULL,
      decision text NOT NULL CHECK (decision IN ('ALLOW','DENY','REQUIRE_APPROVAL')),
      rule_id text NOT NULL,
      policy_revision text NOT NULL,
      status text NOT NULL,
      operation_key text NOT NULL,
      release_id text NOT NULL,
      facts jsonb NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (workflow_id, version),
      UNIQUE (operation_key)
    );
    CREATE INDEX actions_by_target ON actions (tool, target);

    CREATE TABLE approvals (
      id uuid PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      action_id uuid NOT NULL REFERENCES actions(id) UNIQUE,
      action_version integer NOT NULL,
      action_digest text NOT NULL,
      policy_revision text NOT NULL,
      tool text NOT NULL,
      tenant text NOT NULL,
      region text,
      amount_cents integer,
      requester text NOT NULL,
      rule_id text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending','approved','denied','expired','void','used')),
      approver text,
      reason text,
      release_id text NOT NULL,
      -- Trace context of the request that opened it: the decision continues the workflow's trace.
      traceparent text,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      decided_at timestamptz,
      used_at timestamptz
    );
    CREATE INDEX approvals_pending ON approvals (tenant, status);

    -- The idempotency ledger (docs/product/design.md#correctness-rules: fencing, write-ahead, stable keys).
    CREATE TABLE operations (
      key text PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      action_id uuid NOT NULL REFERENCES actions(id),
      action_digest text NOT NULL,
      tool text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending','running','succeeded','failed','failed_unknown')),
      fencing_token bigint NOT NULL DEFAULT 0,
      lease_owner text,
      lease_expires_at timestamptz,
      baseline jsonb,
      -- Write-ahead intent: set (fenced) right before the adapter is called, so a new lease
      -- holder knows whether a non-idempotent effect may already have been sent.
      dispatched_at timestamptz,
      attempts integer NOT NULL DEFAULT 0,
      result jsonb,
      evidence_ref text,
      error text,
      release_id text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX operations_by_status ON operations (status);

    CREATE TABLE tool_switches (
      tool text PRIMARY KEY,
      enabled boolean NOT NULL,
      changed_by text NOT NULL,
      changed_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE credential_epochs (
      id integer PRIMARY KEY CHECK (id = 1),
      epoch integer NOT NULL,
      changed_by text NOT NULL,
      changed_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO credential_epochs (id, epoch, changed_by) VALUES (1, 1, 'migration');

    -- Transactional outbox: the next job is written with the state change that causes it.
    CREATE TABLE outbox (
      id bigserial PRIMARY KEY,
      queue text NOT NULL,
      job_name text NOT NULL,
      job_id text NOT NULL,
      payload jsonb NOT NULL,
      release_id text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      published_at timestamptz
    );
    CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

    CREATE TABLE decision_log (
      id bigserial PRIMARY KEY,
      workflow_id uuid NOT NULL REFERENCES workflows(id),
      proposal_id uuid REFERENCES proposals(id),
      action_id uuid REFERENCES actions(id),
      tool text NOT NULL,
      decision text NOT NULL,
      rule_id text NOT NULL,
      policy_revision text NOT NULL,
      detail jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TABLE decision_log, outbox, credential_epochs, tool_switches, operations, approvals,
      actions, proposals, model_turns, conversation_items, budgets, workflows, releases;
  `.execute(db);
}
