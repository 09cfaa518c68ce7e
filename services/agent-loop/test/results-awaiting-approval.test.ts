import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import type { OutboxRelay } from '@gatehouse/platform';
import { processResult } from '../src/jobs/results.processor.ts';

// One model response asked for two calls: a refund the policy allowed and a reship that needs a
// lead. The refund ran and answered while the reship's approval is still pending: the run goes
// back to `awaiting_approval` with the step naming that approval, not `executing` with no next
// step. While another action is still approved or running, it stays `executing`.
let t: TestDatabase;
const relay = { publish: async () => undefined } as unknown as OutboxRelay;
const outagePolicy = { ceilingMs: 15 * 60_000, credit: true };
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** A run `executing` with the succeeded refund of `createAction` (v1) and a second action v2 in `secondStatus`, both calls unanswered. */
async function runWithTwoCalls(secondStatus: 'pending_approval' | 'approved') {
  const a = await createAction(t.db, { orderId: 'O-1007', amountCents: 2000 });
  await t.db.updateTable('actions').set({ status: 'succeeded' }).where('id', '=', a.actionId).execute();
  const first = await t.db.selectFrom('actions').selectAll().where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const callId = `call_${randomBytes(8).toString('hex')}`;
  await t.db
    .insertInto('actions')
    .values({
      ...first,
      id: randomUUID(),
      call_id: callId,
      version: 2,
      tool: 'reship_order',
      arguments: JSON.stringify({ orderId: 'O-1007' }),
      digest: randomBytes(32).toString('hex'),
      decision: 'REQUIRE_APPROVAL',
      rule_id: 'R9',
      status: secondStatus,
      operation_key: `${a.workflowId}:action:2`,
      facts: JSON.stringify({}),
      tenant: undefined,
      user_id: undefined,
    } as never)
    .execute();
  for (const id of [a.callId, callId])
    await t.db
      .insertInto('conversation_items')
      .values({
        workflow_id: a.workflowId,
        round: 1,
        kind: 'function_call',
        call_id: id,
        item: JSON.stringify({ type: 'function_call', call_id: id }),
      })
      .execute();
  const answer = (park?: 'needs_reconciliation') =>
    processResult(
      {
        release: 'rel-1',
        workflowId: a.workflowId,
        callId: a.callId,
        output: { source: 'issue_refund', trust: 'gatehouse', executed: true },
        ...(park ? { park } : {}),
      },
      { db: t.db, relay, outagePolicy },
    );
  const wf = () => t.db.selectFrom('workflows').select(['state', 'next_step']).where('id', '=', a.workflowId).executeTakeFirstOrThrow();
  const second = () =>
    t.db.selectFrom('actions').select('status').where('workflow_id', '=', a.workflowId).where('version', '=', 2).executeTakeFirstOrThrow();
  return { answer, wf, second, seeded: a };
}

describe('an action answers while another waits for its approval', () => {
  it('the run goes back to awaiting_approval, its next step naming the pending approval', async () => {
    const run = await runWithTwoCalls('pending_approval');
    expect(await run.answer()).toBe('waiting_for_approval');
    expect(await run.wf()).toEqual({
      state: 'awaiting_approval',
      next_step: 'Waiting for a lead to approve reship_order on O-1007 (version 2).',
    });
  });

  it('a result that parks the run for reconciliation ends the other, unclaimed action: it will never run', async () => {
    const run = await runWithTwoCalls('approved');
    // The first action's outcome is unknown (what parks a run).
    await recordEffect(t.db, run.seeded, { status: 'failed_unknown' });
    expect(await run.answer('needs_reconciliation')).toBe('parked');
    expect(await run.wf()).toMatchObject({ state: 'needs_reconciliation' });
    expect(await run.second()).toEqual({ status: 'superseded' });
  });

  it('another action approved (queued to run): the run stays executing', async () => {
    const run = await runWithTwoCalls('approved');
    expect(await run.answer()).toBe('waiting_for_other_calls');
    expect(await run.wf()).toMatchObject({ state: 'executing' });
  });
});
