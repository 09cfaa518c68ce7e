import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { reviveJsonRow, reviveWorkflow, type OperationsTable } from '../src/index.ts';
import type { Selectable } from 'kysely';

// The executor reads the workflow as `to_jsonb(w)` beside the action's columns, and the operation
// protocol the operation as `to_jsonb(op)`: revived, each must be the row `selectAll()` gives,
// column for column and type for type (a column added later with another JSON shape, e.g. a
// timestamp or a bigint, fails here).

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

describe('reviveJsonRow', () => {
  it('gives the selectAll() row from to_jsonb(w)', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-1001' });
    await tdb.db
      .updateTable('workflows')
      .set({ stop_reason: 'denied', next_step: 'ask a lead', round: 3, updated_at: new Date('2026-12-02T10:11:12.345Z') })
      .where('id', '=', a.workflowId)
      .execute();
    const plain = await tdb.db.selectFrom('workflows').selectAll().where('id', '=', a.workflowId).executeTakeFirstOrThrow();
    const json = await tdb.db
      .selectFrom('workflows as w')
      .select(sql<unknown>`to_jsonb(w)`.as('row'))
      .where('w.id', '=', a.workflowId)
      .executeTakeFirstOrThrow();
    const revived = reviveWorkflow(json.row);
    expect(revived).toStrictEqual(plain);
    expect(revived.updated_at).toBeInstanceOf(Date);
  });

  it('gives the selectAll() operations row from to_jsonb(o): bigint fencing token, set and null timestamps', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-1002' });
    await recordEffect(tdb.db, a);
    await tdb.db
      .updateTable('operations')
      .set({ fencing_token: '4242', lease_expires_at: new Date('2026-12-02T10:11:12.345Z') })
      .where('key', '=', a.operationKey)
      .execute();
    const plain = await tdb.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    const json = await tdb.db
      .selectFrom('operations as o')
      .select(sql<unknown>`to_jsonb(o)`.as('row'))
      .where('o.key', '=', a.operationKey)
      .executeTakeFirstOrThrow();
    const revived = reviveJsonRow<Selectable<OperationsTable>>(json.row, {
      timestamps: ['lease_expires_at', 'dispatched_at', 'frozen_at', 'created_at', 'updated_at'],
      bigints: ['fencing_token'],
    });
    expect(revived).toStrictEqual(plain);
    expect(plain.dispatched_at).toBeNull();
  });

  it('refuses what is not a row', () => {
    expect(() => reviveWorkflow(null)).toThrow(TypeError);
  });
});
