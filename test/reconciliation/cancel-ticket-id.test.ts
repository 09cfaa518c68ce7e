import { describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import { seedScheduleStep } from './seed.ts';
import { cancelTicketId, requestChangeCancel } from '@gatehouse/reconciliation';
import { intakeFixture, SECRET } from '../../services/agent-loop/test/support/intake-app.ts';

// Out-of-band runs are no requester's ticket (ADR 0757). A change cancel's key (`cancel:<operationKey>`) is made of the intake's ticket-id characters and
// is predictable from the scheduled run, which every user of the tenant may read. The cancel's run
// took it as its ticket id, so a requester who submitted a ticket of that id first made every
// cancel request of the change fail on the tenant's unique ticket id: the change would run at its
// window whatever on-call asked (docs/decisions/0757-an-out-of-band-ticket-id-is-no-intake-ticket-id.md).

const app = intakeFixture('cancel-ticket-id-test');

describe('a requester holds the cancel key as a ticket id', () => {
  it('the cancel is still requested, under a ticket id the intake cannot take; the requester keeps their ticket', async () => {
    const db = app.db();
    const operationKey = await seedScheduleStep(db, 'succeeded', 'completed');
    const token = await signUserToken({ sub: 'eng-lou', tenant: 'quillfeather', roles: ['engineer'] }, SECRET);
    const submitted = await fetch(`${app.url()}/v1/tickets`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ticketId: `cancel:${operationKey}`, text: 'What is the status of change CHG-101?', pack: 'change' }),
    });
    expect(submitted.status).toBe(202);
    const { workflowId: theirs } = (await submitted.json()) as { workflowId: string };

    const ticket = await requestChangeCancel(
      { db, stagingUrl: 'http://127.0.0.1:9', hmacKey: 'local-audit-hmac-key-change-me', release: 'rel-1' },
      { ref: operationKey, reason: 'customer asked to postpone', operator: 'ops-gus' },
    );
    expect(ticket).toMatchObject({ cancelKey: `cancel:${operationKey}`, tenant: 'quillfeather', existing: false });
    const run = await db
      .selectFrom('workflows')
      .select(['ticket_id', 'state'])
      .where('id', '=', ticket.workflowId)
      .executeTakeFirstOrThrow();
    expect(run).toEqual({ ticket_id: cancelTicketId(`cancel:${operationKey}`), state: 'awaiting_approval' });
    const approval = await db
      .selectFrom('approvals')
      .select(['status', 'approver_role'])
      .where('id', '=', ticket.approvalId)
      .executeTakeFirstOrThrow();
    expect(approval).toEqual({ status: 'pending', approver_role: 'change_owner' });
    // The requester's own run is untouched, and its ticket id still names it.
    const mine = await db.selectFrom('workflows').select(['id', 'user_id']).where('ticket_id', '=', `cancel:${operationKey}`).execute();
    expect(mine).toEqual([{ id: theirs, user_id: 'eng-lou' }]);
  });

  it("the operator who asked cannot turn the cancel's run into a conversation: a follow-up is 403 not_a_requester, nothing changes", async () => {
    const db = app.db();
    const operationKey = await seedScheduleStep(db, 'succeeded', 'completed');
    const ticket = await requestChangeCancel(
      { db, stagingUrl: 'http://127.0.0.1:9', hmacKey: 'local-audit-hmac-key-change-me', release: 'rel-1' },
      { ref: operationKey, reason: 'customer asked to postpone', operator: 'ops-gus' },
    );
    const outboxBefore = (await db.selectFrom('outbox').select('id').execute()).length;
    const token = await signUserToken({ sub: 'ops-gus', tenant: 'quillfeather', roles: ['operator'] }, SECRET);
    const r = await fetch(`${app.url()}/v1/workflows/${ticket.workflowId}/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ text: 'Please schedule change CHG-101 in the manual window.' }),
    });
    expect(r.status).toBe(403);
    expect(((await r.json()) as { error: { reason: string } }).error.reason).toBe('not_a_requester');
    // The cancel still waits on its change owner; no model round, no message.
    const approval = await db.selectFrom('approvals').select('status').where('id', '=', ticket.approvalId).executeTakeFirstOrThrow();
    expect(approval.status).toBe('pending');
    const run = await db.selectFrom('workflows').select('state').where('id', '=', ticket.workflowId).executeTakeFirstOrThrow();
    expect(run.state).toBe('awaiting_approval');
    expect((await db.selectFrom('outbox').select('id').execute()).length).toBe(outboxBefore);
    const messages = await db.selectFrom('conversation_items').select('id').where('workflow_id', '=', ticket.workflowId).execute();
    expect(messages).toEqual([]);
  });
});
