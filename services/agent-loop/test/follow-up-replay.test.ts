import { describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import { createAction } from '@gatehouse/testing';
import { intakeFixture, SECRET } from './support/intake-app.ts';

// A follow-up sent again with the same Idempotency-Key (a client retrying after a lost answer) is
// answered what the first one was answered — the actions it superseded and the approvals it voided
// — not an empty list (docs/decisions/0510, amended). Sequential retries, and the retry racing the
// first request (both under the run's lock: whichever loses replays the winner's answer).

const app = intakeFixture('intake-follow-up-replay-test');

interface Answer {
  status: number;
  body: { workflowId?: string; superseded?: Array<{ version: number; tool: string; voidedApprovals: string[] }>; replayed?: true };
}

async function followUp(workflowId: string, key: string, text: string): Promise<Answer> {
  const token = await signUserToken({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['rep'] }, SECRET);
  const r = await fetch(`${app.url()}/v1/workflows/${workflowId}/messages`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ text }),
  });
  return { status: r.status, body: (await r.json()) as Answer['body'] };
}

/** A run awaiting the approval of a 120.00 refund (its approval pending): what a follow-up supersedes. */
const awaitingApproval = () => createAction(app.db(), { orderId: 'O-1004', amountCents: 12_000, pendingApproval: {} });

describe('a replayed follow-up answers what the first answered', () => {
  it('sent twice with one key: the retry lists the same superseded action and voided approval, replayed', async () => {
    const a = await awaitingApproval();
    const text = 'Actually, make that a reship instead.';
    const first = await followUp(a.workflowId, 'fu-replay-1', text);
    expect(first.status).toBe(202);
    expect(first.body).toEqual({
      workflowId: a.workflowId,
      superseded: [{ version: a.version, tool: 'issue_refund', voidedApprovals: [a.approvalId] }],
    });
    const retry = await followUp(a.workflowId, 'fu-replay-1', text);
    expect(retry.status).toBe(202);
    expect(retry.body).toEqual({ ...first.body, replayed: true });
    // A third time, still the same; and the message was added once.
    expect((await followUp(a.workflowId, 'fu-replay-1', text)).body).toEqual({ ...first.body, replayed: true });
    const added = await app
      .db()
      .selectFrom('conversation_items')
      .select('id')
      .where('workflow_id', '=', a.workflowId)
      .where('kind', '=', 'user_message')
      .where('idempotency_key', '=', 'fu-replay-1')
      .execute();
    expect(added).toHaveLength(1);
  });

  it('a follow-up that superseded nothing is replayed as superseding nothing', async () => {
    const a = await awaitingApproval();
    const first = await followUp(a.workflowId, 'fu-replay-2a', 'first words');
    expect(first.body.superseded).toHaveLength(1);
    const second = await followUp(a.workflowId, 'fu-replay-2b', 'any update?');
    expect(second.body).toEqual({ workflowId: a.workflowId, superseded: [] });
    expect((await followUp(a.workflowId, 'fu-replay-2b', 'any update?')).body).toEqual({ ...second.body, replayed: true });
    expect((await followUp(a.workflowId, 'fu-replay-2a', 'first words')).body).toEqual({ ...first.body, replayed: true });
  });

  it('the retry racing the first request (12 runs): both answers list the same superseded action, one of them replayed', async () => {
    for (let i = 0; i < 12; i++) {
      const a = await awaitingApproval();
      const key = `fu-race-${i}`;
      const text = `second damaged item, try ${i}`;
      // Both requests are sent together; the run's row lock orders them, the loser replays.
      const [x, y] = await Promise.all([followUp(a.workflowId, key, text), followUp(a.workflowId, key, text)]);
      expect([x.status, y.status]).toEqual([202, 202]);
      const expected = [{ version: a.version, tool: 'issue_refund', voidedApprovals: [a.approvalId] }];
      expect(x.body.superseded, `run ${i}`).toEqual(expected);
      expect(y.body.superseded, `run ${i}`).toEqual(expected);
      expect([x.body.replayed, y.body.replayed].filter(Boolean)).toEqual([true]);
    }
  });
});
