import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { tokenFor } from '@gatehouse/cli';
import { createAction } from '@gatehouse/testing';
import { SECRET, startFuzzApps, type FuzzApps } from '../fuzz/support/apps.ts';

/**
 * The intake's public contract at its edges, in-process over a real ledger and queue prefix:
 * ticket idempotency under concurrent submissions, blank text refused (ADR 0681), and one
 * follow-up retried concurrently with its Idempotency-Key.
 */

let f: FuzzApps;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  f = await startFuzzApps();
  for (const u of ['rep-ana', 'rep-ben']) tokens[u] = await tokenFor(u, SECRET);
});
afterAll(async () => {
  await f?.close();
});

async function post(path: string, user: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(f.apps['agent-loop'].url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokens[user]}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> & { error?: { reason: string } } };
}

const workflowsOf = async (ticketId: string) =>
  (await f.db.db.selectFrom('workflows').select('id').where('ticket_id', '=', ticketId).execute()).map((w) => w.id);
const userMessages = async (workflowId: string) =>
  Number(
    (
      await sql<{
        n: string;
      }>`select count(*) as n from conversation_items where workflow_id = ${workflowId} and kind = 'user_message'`.execute(f.db.db)
    ).rows[0]!.n,
  );

describe('a ticket sent several times at once', () => {
  it('the same ticket, eight times concurrently: every answer is 202 with the one workflow, recorded once', async () => {
    const body = { ticketId: 'T-RACE-SAME', text: 'Order O-1002 arrived damaged', mode: 'act' };
    const answers = await Promise.all(Array.from({ length: 8 }, () => post('/v1/tickets', 'rep-ana', body)));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(202));
    const ids = await workflowsOf('T-RACE-SAME');
    expect(ids).toHaveLength(1);
    expect(new Set(answers.map((a) => a.body.workflowId))).toEqual(new Set(ids));
    expect(await userMessages(ids[0]!)).toBe(1);
  });

  it('one ticket id with two texts at once: one 202, the other 409 ticket_conflict, one workflow', async () => {
    const answers = await Promise.all(
      ['first text', 'second text'].map((text) => post('/v1/tickets', 'rep-ana', { ticketId: 'T-RACE-DIFF', text })),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    expect(answers.find((a) => a.status === 409)!.body.error!.reason).toBe('ticket_conflict');
    expect(await workflowsOf('T-RACE-DIFF')).toEqual([answers.find((a) => a.status === 202)!.body.workflowId]);
  });

  it('one ticket id by two reps of the tenant at once: one 202, the other 409 ticket_conflict', async () => {
    const answers = await Promise.all(
      ['rep-ana', 'rep-ben'].map((u) => post('/v1/tickets', u, { ticketId: 'T-RACE-USERS', text: 'same words' })),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    expect(await workflowsOf('T-RACE-USERS')).toHaveLength(1);
  });
});

describe('blank text is refused (ADR 0681)', () => {
  const blanks = [' ', '   ', '\n\t ', '\u00a0\u3000'];

  it.each(blanks)('a ticket whose text is only whitespace (%j): 400 invalid_body, nothing recorded', async (text) => {
    const ticketId = `T-BLANK-${Buffer.from(text).toString('hex')}`;
    const r = await post('/v1/tickets', 'rep-ana', { ticketId, text });
    expect(r.status).toBe(400);
    expect(r.body.error!.reason).toBe('invalid_body');
    expect(await workflowsOf(ticketId)).toEqual([]);
  });

  it('a follow-up whose text is only whitespace: 400 invalid_body; the pending approval stays open, nothing added', async () => {
    const seeded = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000, pendingApproval: {} });
    const before = await userMessages(seeded.workflowId);
    for (const text of blanks) {
      const r = await post(`/v1/workflows/${seeded.workflowId}/messages`, 'rep-ana', { text });
      expect(r.status).toBe(400);
      expect(r.body.error!.reason).toBe('invalid_body');
    }
    const approval = await f.db.db.selectFrom('approvals').select('status').where('id', '=', seeded.approvalId!).executeTakeFirstOrThrow();
    expect(approval.status).toBe('pending');
    const action = await f.db.db.selectFrom('actions').select('status').where('id', '=', seeded.actionId).executeTakeFirstOrThrow();
    expect(action.status).toBe('pending_approval');
    expect(await userMessages(seeded.workflowId)).toBe(before);
  });

  it('text with words around whitespace is still accepted as written', async () => {
    const r = await post('/v1/tickets', 'rep-ana', { ticketId: 'T-PADDED', text: '  refund O-1002 please  ' });
    expect(r.status).toBe(202);
  });
});

describe('a follow-up sent several times at once', () => {
  it('one follow-up sent five times at once with one Idempotency-Key: added once, the others replayed', async () => {
    const seeded = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000, pendingApproval: {} });
    const before = await userMessages(seeded.workflowId);
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        post(`/v1/workflows/${seeded.workflowId}/messages`, 'rep-ana', { text: 'cancel that' }, { 'idempotency-key': 'same-key' }),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(5).fill(202));
    expect(answers.filter((a) => a.body.replayed === true)).toHaveLength(4);
    expect(await userMessages(seeded.workflowId)).toBe(before + 1);
  });
});
