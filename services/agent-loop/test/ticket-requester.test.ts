import { describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import { intakeFixture, SECRET } from './support/intake-app.ts';

// A tenant's ticket id maps to one workflow, and that workflow is its requester's: a colleague
// sending the same ticket is told whose run it is (409), not handed it as their own (ADR 0661).

const app = intakeFixture('intake-ticket-requester-test');

const tokenOf = (sub: string) => signUserToken({ sub, tenant: 'quillfeather', roles: ['rep'] }, SECRET);
const submit = async (
  sub: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: { workflowId?: string; error?: { reason: string; message: string } } }> => {
  const r = await fetch(`${app.url()}/v1/tickets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await tokenOf(sub)}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: (await r.json()) as { workflowId?: string; error?: { reason: string; message: string } } };
};

describe('a ticket id sent again', () => {
  const body = { ticketId: 'T-shared', text: 'What is the status of order O-1001?' };

  it('by its requester with the same text: the same workflow', async () => {
    const a = await submit('rep-ana', body);
    const b = await submit('rep-ana', body);
    expect(a.status).toBe(202);
    expect(b.status).toBe(202);
    expect(b.body.workflowId).toBe(a.body.workflowId);
  });

  it('by a colleague of the tenant, same text: 409 ticket_conflict naming the workflow, nothing recorded', async () => {
    const [{ n: before }] = [
      await app
        .db()
        .selectFrom('workflows')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow(),
    ];
    const mine = await app.db().selectFrom('workflows').select('id').where('ticket_id', '=', 'T-shared').executeTakeFirstOrThrow();
    const r = await submit('rep-ben', body);
    expect(r.status).toBe(409);
    expect(r.body.error?.reason).toBe('ticket_conflict');
    expect(r.body.error?.message).toContain('another user of your tenant');
    expect(r.body.error?.message).toContain(mine.id);
    const after = await app
      .db()
      .selectFrom('workflows')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    expect(after.n).toBe(before);
  });
});

describe('the pack of a ticket is the one its requester role opens (ADR 0675)', () => {
  const count = async (table: 'workflows' | 'outbox') =>
    (
      await app
        .db()
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow()
    ).n;

  it('a representative sending a change-pack ticket, or an engineer a support-pack one: 403 pack_not_allowed, nothing recorded or enqueued', async () => {
    const [workflows, outbox] = [await count('workflows'), await count('outbox')];
    const rep = await submit('rep-ana', {
      ticketId: 'T-pack-rep',
      text: 'Please schedule change CHG-102 in the manual window.',
      mode: 'act',
      pack: 'change',
    });
    const eng = await submit('eng-lou', { ticketId: 'T-pack-eng', text: 'Refund 30.00 on order O-1001.', mode: 'act', pack: 'support' });
    const engDefault = await submit('eng-lou', { ticketId: 'T-pack-eng2', text: 'Refund 30.00 on order O-1001.', mode: 'act' });
    for (const [r, own] of [
      [rep, 'support'],
      [eng, 'change'],
      [engDefault, 'change'],
    ] as const) {
      expect(r.status).toBe(403);
      expect(r.body.error?.reason).toBe('pack_not_allowed');
      expect(r.body.error?.message).toContain(`send pack "${own}"`);
    }
    expect(await count('workflows')).toBe(workflows);
    expect(await count('outbox')).toBe(outbox);
  });

  it('each role opens its own pack', async () => {
    const rep = await submit('rep-ana', { ticketId: 'T-pack-rep-ok', text: 'What is the status of order O-1001?' });
    const eng = await submit('eng-lou', { ticketId: 'T-pack-eng-ok', text: 'What is change CHG-101?', pack: 'change' });
    expect([rep.status, eng.status]).toEqual([202, 202]);
    const packs = await app
      .db()
      .selectFrom('workflows')
      .select(['ticket_id', 'pack'])
      .where('ticket_id', 'in', ['T-pack-rep-ok', 'T-pack-eng-ok'])
      .orderBy('ticket_id')
      .execute();
    expect(packs).toEqual([
      { ticket_id: 'T-pack-eng-ok', pack: 'change' },
      { ticket_id: 'T-pack-rep-ok', pack: 'support' },
    ]);
  });
});
