import { sql, type Kysely } from 'kysely';

/**
 * Carries the workflow's tenant and user on each action row, so the refund limits' rolling sums
 * (docs/product/policy-rules.md#r5, #r6, R10) read one index range of the tenant's refunds
 * instead of every tenant's refunds of the window joined to `workflows`
 * (docs/decisions/0340-refund-sums-on-the-action-row.md). One owner fills them: a BEFORE INSERT
 * trigger copies them from the action's workflow, which is immutable in both, so no writer can
 * set them wrong and a former release's inserts (which do not name them) stay valid — backward
 * compatible. Existing rows are back-filled. The columns stay nullable (a candidate's migration
 * adds nothing a former release could violate); the trigger leaves no row without them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE actions ADD COLUMN tenant text, ADD COLUMN user_id text`.execute(db);
  await sql`UPDATE actions a SET tenant = w.tenant, user_id = w.user_id FROM workflows w WHERE w.id = a.workflow_id`.execute(db);
  await sql`
    CREATE FUNCTION actions_carry_workflow_identity() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      SELECT w.tenant, w.user_id INTO NEW.tenant, NEW.user_id FROM workflows w WHERE w.id = NEW.workflow_id;
      RETURN NEW;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER actions_carry_workflow_identity BEFORE INSERT ON actions
    FOR EACH ROW EXECUTE FUNCTION actions_carry_workflow_identity()`.execute(db);
  await sql`CREATE INDEX actions_by_tenant_tool_time ON actions (tenant, tool, created_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX actions_by_tenant_tool_time`.execute(db);
  await sql`DROP TRIGGER actions_carry_workflow_identity ON actions`.execute(db);
  await sql`DROP FUNCTION actions_carry_workflow_identity()`.execute(db);
  await sql`ALTER TABLE actions DROP COLUMN tenant, DROP COLUMN user_id`.execute(db);
}
