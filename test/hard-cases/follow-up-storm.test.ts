import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHuntStack, fixtures, msg, submit, waitFor, waitUntil, settled, call, type Entry, type HuntStack } from './helpers.ts';

let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/** The statuses the model-stub answered for `ticketId`, in order. */
async function answered(ticketId: string): Promise<number[]> {
  const r = await call('GET', `${s.url('model-stub')}/requests?ticketId=${ticketId}`, null);
  return (r.body.requests as Array<{ status: number }>).map((x) => x.status);
}

describe('hunt: follow-ups that keep arriving while the model answers', () => {
  it('five follow-ups, each during a model call of the same round: the round is re-run with each, and the run completes (not step_failed)', async () => {
    // Each model call of the round is slow: a 503 the client waits 2.5 s on, then the answer.
    const slow: Entry = { type: 'error', status: 503, headers: { 'retry-after-ms': '2500' } };
    const script: Entry[] = [];
    for (let i = 0; i < 5; i++) script.push(slow, msg(`answer ${i}`));
    script.push(msg('Read all five notes.'));
    await fixtures(s, 'F-storm', script);
    const { token, workflowId } = await submit(s, 'rep-ana', 'F-storm', 'What is the status of order O-1001?', 'investigate');
    for (let i = 0; i < 5; i++) {
      await waitUntil(async () => (await answered('F-storm')).filter((st) => st === 503).length > i, `503 number ${i + 1}`);
      const m = await call('POST', `${s.url('agent-loop')}/v1/workflows/${workflowId}/messages`, token, { text: `Note ${i + 1}.` });
      expect(m.status).toBe(202);
    }
    const end = await waitFor(s, token, workflowId, settled, 90_000);
    expect([end.state, end.stopReason]).toEqual(['completed', null]);
    const last = (
      (await call('GET', `${s.url('model-stub')}/requests?ticketId=F-storm`, null)).body.requests as Array<{ input: unknown }>
    ).at(-1)!;
    expect(JSON.stringify(last.input)).toContain('Note 5.');
    // The five answers thrown away were still paid for: the run's spend budget counts them.
    const recorded = await s.db.db
      .selectFrom('model_turns')
      .select((eb) => eb.fn.sum<string>(eb('input_tokens', '+', eb.ref('output_tokens'))).as('n'))
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    const budget = await s.db.db
      .selectFrom('budgets')
      .select(['tokens_used', 'spend_micro_usd'])
      .where('workflow_id', '=', workflowId)
      .executeTakeFirstOrThrow();
    expect(Number(recorded.n)).toBeGreaterThan(0);
    expect(Number(budget.tokens_used)).toBeGreaterThan(Number(recorded.n));
  });
});
