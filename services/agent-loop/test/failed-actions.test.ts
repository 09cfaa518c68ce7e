import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction, recordEffect } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { failedActions, notCarriedOut } from '../src/jobs/turns.processor.ts';

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
    expect(await failedThen('O-1001', null)).toEqual([{ tool: 'issue_refund', target: 'O-1001', credentialRefused: false }]);
  });

  it('leaves it out once a later action of the same tool on the same target succeeded or may still run', async () => {
    for (const status of ['succeeded', 'running', 'approved', 'pending_approval', 'failed_unknown'])
      expect(await failedThen('O-1002', { tool: 'issue_refund', target: 'O-1002', status }), status).toEqual([]);
  });

  it('still names it when the later action failed or was denied too, or was on another target or tool', async () => {
    expect(await failedThen('O-1003', { tool: 'issue_refund', target: 'O-1003', status: 'denied' })).toEqual([
      { tool: 'issue_refund', target: 'O-1003', credentialRefused: false },
    ]);
    expect(await failedThen('O-1004', { tool: 'issue_refund', target: 'O-1005', status: 'succeeded' })).toEqual([
      { tool: 'issue_refund', target: 'O-1004', credentialRefused: false },
    ]);
    expect(await failedThen('O-1006', { tool: 'reship_order', target: 'O-1006', status: 'succeeded' })).toEqual([
      { tool: 'issue_refund', target: 'O-1006', credentialRefused: false },
    ]);
    expect(await failedThen('O-1007', { tool: 'issue_refund', target: 'O-1007', status: 'failed' })).toEqual([
      { tool: 'issue_refund', target: 'O-1007', credentialRefused: false },
      { tool: 'issue_refund', target: 'O-1007', credentialRefused: false },
    ]);
  });
});

// A 401 from a system of record refuses our own credential (ADR 0600): the executor's delegation
// key is not one it trusts. The rep was told "the system of record kept failing" — a resubmission
// meets the same refusal; on-call must fix the key (ADR 0761).
describe('a failed action whose system of record refused our own credential', () => {
  /** A run whose refund on `orderId` failed with the operation error `error`. */
  async function failedWith(orderId: string, error: string) {
    const a = await createAction(t.db, { orderId, amountCents: 2000 });
    await recordEffect(t.db, a, { status: 'failed', error });
    return failedActions(t.db, a.workflowId);
  }

  it('is marked credentialRefused for a 401 or a wrong scope, not for a 5xx or a refusal on the system’s own authority', async () => {
    expect(await failedWith('O-1011', '401:invalid_token:ERR_JWKS_NO_MATCHING_KEY')).toEqual([
      { tool: 'issue_refund', target: 'O-1011', credentialRefused: true },
    ]);
    expect(await failedWith('O-1012', '403:wrong_scope')).toEqual([{ tool: 'issue_refund', target: 'O-1012', credentialRefused: true }]);
    expect(await failedWith('O-1013', '503:server_error')).toEqual([{ tool: 'issue_refund', target: 'O-1013', credentialRefused: false }]);
    expect(await failedWith('O-1014', '403:revoked_epoch')).toEqual([{ tool: 'issue_refund', target: 'O-1014', credentialRefused: false }]);
  });

  it('the next step names the refused credential and on-call’s fix, not "kept failing"', () => {
    const refused = notCarriedOut([{ tool: 'issue_refund', target: 'O-1011', credentialRefused: true }]);
    expect(refused).toMatch(/^Done, but not carried out: issue_refund on O-1011 \(the system of record refused Gatehouse’s own credential/);
    expect(refused).toContain('delegation signing key');
    expect(refused).toContain('on-call');
    expect(refused).not.toContain('kept failing');
    const both = notCarriedOut([
      { tool: 'issue_refund', target: 'O-1013', credentialRefused: false },
      { tool: 'notify_customer', target: 'O-1011', credentialRefused: true },
    ]);
    expect(both).toMatch(
      /issue_refund on O-1013 \(the system of record kept failing; .*notify_customer on O-1011 \(the system of record refused/,
    );
  });
});
