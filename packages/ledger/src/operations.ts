import type { Selectable } from 'kysely';
import type { Trx } from './db.ts';
import type { ActionsTable, OperationsTable } from './schema.ts';

/**
 * Reserves the idempotency-ledger row of an action version (docs/product/design.md#uniqueness-in-the-database):
 * inserts `operations` with the action's operation key as `pending` if absent, then returns the
 * row locked `FOR UPDATE` in `trx` — whoever reserved it first. The caller holds the workflow and
 * action row locks (lock order workflows → actions → operations → approvals).
 */
export async function reserveOperation(
  trx: Trx,
  action: Pick<Selectable<ActionsTable>, 'id' | 'operation_key' | 'workflow_id' | 'digest' | 'tool' | 'release_id'>,
): Promise<Selectable<OperationsTable>> {
  await trx
    .insertInto('operations')
    .values({
      key: action.operation_key,
      workflow_id: action.workflow_id,
      action_id: action.id,
      action_digest: action.digest,
      tool: action.tool,
      status: 'pending',
      release_id: action.release_id,
    })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  return trx.selectFrom('operations').selectAll().where('key', '=', action.operation_key).forUpdate().executeTakeFirstOrThrow();
}
