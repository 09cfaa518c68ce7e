import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { failedActions } from '../src/jobs/turns.processor.ts';

// The next step of a completed run names the actions not carried out — but never one a later
// action on the same target may have carried out since (the model proposed it again and it ran):
// "not carried out" would then tell the rep to refund twice.
let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** A run whose refund v1 on `orderId` failed, then a v2 of `tool` on `target` in `status`. */
async function failedThen(orderId: string, second: { tool: string; target: string; status: string } | null) {
  const a = await createAction(t.db, { orderId, amountCents: 2000 });
  await t.db.updateTable('actions').set({ status: 'failed' }).where('id', '=', a.actionId).execute();
  if (second) {
    const first = await t.db.selectFrom('actions').selectAll().where('id', '=', a.actionId).executeTakeFirstOrThrow();
    await t.db
      .insertInto('actions')
      .values({
        ...first,
        id: randomUUID(),
        call_id: `call_${randomBytes(8).toString('hex')}`,
        version: 2,
        tool: second.tool,
        target: second.target,
        digest: randomBytes(32).toString('hex'),
        status: second.status,
        operation_key: `${a.workflowId}:action:2`,
        facts: JSON.stringify({}),
      } as never)
      .execute();
  }
  return failedActions(t.db, a.workflowId);
}

describe('failedActions', () => {
  it('names a failed action nothing came after', async () => {
    expect(await failedThen('O-1001', null)).toEqual([{ tool: 'issue_refund', target: 'O-1001' }]);
  });

  it('leaves it out once a later action of the same tool on the same target succeeded or may still run', async () => {
    for (const status of ['succeeded', 'running', 'approved', 'pending_approval', 'failed_unknown'])
      expect(await failedThen('O-1002', { tool: 'issue_refund', target: 'O-1002', status }), status).toEqual([]);
  });

  it('still names it when the later action failed or was denied too, or was on another target or tool', async () => {
    expect(await failedThen('O-1003', { tool: 'issue_refund', target: 'O-1003', status: 'denied' })).toEqual([
      { tool: 'issue_refund', target: 'O-1003' },
    ]);
    expect(await failedThen('O-1004', { tool: 'issue_refund', target: 'O-1005', status: 'succeeded' })).toEqual([
      { tool: 'issue_refund', target: 'O-1004' },
    ]);
    expect(await failedThen('O-1006', { tool: 'reship_order', target: 'O-1006', status: 'succeeded' })).toEqual([
      { tool: 'issue_refund', target: 'O-1006' },
    ]);
    expect(await failedThen('O-1007', { tool: 'issue_refund', target: 'O-1007', status: 'failed' })).toEqual([
      { tool: 'issue_refund', target: 'O-1007' },
      { tool: 'issue_refund', target: 'O-1007' },
    ]);
  });
});
