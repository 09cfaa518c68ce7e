import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { reviveWorkflow } from '../src/index.ts';

// The executor reads the workflow as `to_jsonb(w)` beside the action's columns: revived, it must
// be the row `selectAll()` gives, column for column and type for type (a column added later with
// another JSON shape, e.g. a timestamp or a bigint, fails here).

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

describe('reviveWorkflow', () => {
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

  it('refuses what is not a row', () => {
    expect(() => reviveWorkflow(null)).toThrow(TypeError);
  });
});
