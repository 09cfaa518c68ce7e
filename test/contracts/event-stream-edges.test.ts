import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { inTransaction, stopRun } from '@gatehouse/ledger';
import { sql } from 'kysely';
import { createAction } from '@gatehouse/testing';
import type { WorkflowEvent } from '@gatehouse/contracts';
import type { OutboxRelay } from '@gatehouse/platform';
import { processResult } from '@gatehouse/agent-loop';
import { SECRET, startFuzzApps, type FuzzApps } from '../fuzz/support/apps.ts';

/**
 * `GET /v1/workflows/:id/events` at the edges of a run's events (docs/decisions/0250-pushed-workflow-events.md):
 * a `Last-Event-ID` past the workflow's last event names no event, so the stream could never send
 * the terminal event and never end — it is refused `400 bad_last_event_id` (an EventSource stops on
 * it); and the terminal event of a stop shows the actions and approvals the stop ended.
 */

let f: FuzzApps;
let token: string;

beforeAll(async () => {
  f = await startFuzzApps();
  token = await tokenFor('rep-ana', SECRET);
});
afterAll(async () => {
  await f?.close();
});

const seqOf = async (id: string) =>
  (await f.db.db.selectFrom('workflows').select('event_seq').where('id', '=', id).executeTakeFirstOrThrow()).event_seq;

/** Opens the stream with `lastEventId`; resolves with the status and whether the body ended within `ms`. */
async function open(id: string, lastEventId: string, whileOpen: () => Promise<void>, ms = 6000) {
  const ac = new AbortController();
  const res = await fetch(`${f.apps['agent-loop'].url}/v1/workflows/${id}/events`, {
    headers: { authorization: `Bearer ${token}`, 'last-event-id': lastEventId },
    signal: ac.signal,
  });
  if (res.status !== 200) return { status: res.status, body: await res.text(), ended: true };
  await whileOpen();
  let text = '';
  const reader = res.body!.getReader();
  const timer = setTimeout(() => ac.abort(), ms);
  let ended = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        ended = true;
        break;
      }
      text += Buffer.from(value).toString('utf8');
    }
  } catch {
    // aborted: the stream was still open after `ms`
  } finally {
    clearTimeout(timer);
  }
  return { status: res.status, body: text, ended };
}

const stop = async (id: string) => {
  await inTransaction(f.db.db, (trx) => stopRun(trx, { id }, 'budget_exhausted', 'Submit a new ticket.', 'test'));
};

describe('Last-Event-ID and the workflow’s last event', () => {
  it('past the last event of a live workflow: 400 bad_last_event_id, no stream is held', async () => {
    const { workflowId } = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000, pendingApproval: {} });
    const ahead = String((await seqOf(workflowId)) + 5);
    const answer = await open(workflowId, ahead, () => stop(workflowId));
    expect([answer.status, answer.ended]).toEqual([400, true]);
    expect(JSON.parse(answer.body).error.reason).toBe('bad_last_event_id');
  });

  it('at the last event of a live workflow (a reconnect): what follows is sent; the terminal event shows what the stop ended, as the read does', async () => {
    const { workflowId, approvalId } = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000, pendingApproval: {} });
    const last = await seqOf(workflowId);
    const answer = await open(workflowId, String(last), () => stop(workflowId));
    expect([answer.status, answer.ended]).toEqual([200, true]);
    const events = answer.body
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)) as WorkflowEvent);
    expect(events.map((e) => [e.seq, e.state, e.terminal])).toEqual([[last + 1, 'stopped', true]]);
    // The stop voided the approval and superseded its action (ADR 0610): the run's last event says so.
    const read = await f.db.db.selectFrom('approvals').select('status').where('id', '=', approvalId!).executeTakeFirstOrThrow();
    expect(read.status).toBe('void');
    expect(events[0]!.pendingApprovals).toEqual([]);
    expect(events[0]!.actions.map((a) => a.status)).toEqual(['superseded']);
  });

  it('the terminal event of a park (needs_reconciliation) shows the actions and approvals the park ended, as the read does', async () => {
    // One refund waits for its approval; another call of the run (a reship) ended with an unknown outcome.
    const { workflowId, approvalId, actionId } = await createAction(f.db.db, {
      orderId: 'O-1002',
      amountCents: 12_000,
      pendingApproval: {},
    });
    const callId = `call_unknown_${workflowId.slice(0, 8)}`;
    await sql`insert into actions (id, workflow_id, proposal_id, call_id, version, tool, target, arguments, digest, decision, rule_id,
        policy_revision, status, operation_key, release_id, facts)
      select gen_random_uuid(), workflow_id, proposal_id, ${callId}, version + 1, 'reship_order', target, arguments, digest,
        'ALLOW', 'ALL', policy_revision, 'failed_unknown', operation_key || ':unknown', release_id, facts
      from actions where id = ${actionId}`.execute(f.db.db);
    await sql`insert into operations (key, workflow_id, action_id, action_digest, tool, status, release_id)
      select operation_key, workflow_id, id, digest, tool, 'failed_unknown', release_id from actions where call_id = ${callId}`.execute(
      f.db.db,
    );
    const last = await seqOf(workflowId);
    const relay = { publish: async () => undefined } as unknown as OutboxRelay;
    const outcome = await processResult(
      { release: 'rel-1', workflowId, callId, output: { executed: false, status: 'failed_unknown' }, park: 'needs_reconciliation' },
      { db: f.db.db, relay, outagePolicy: {} as never },
    );
    expect(outcome).toBe('parked');
    const read = await f.db.db.selectFrom('approvals').select('status').where('id', '=', approvalId!).executeTakeFirstOrThrow();
    expect(read.status).toBe('void');
    const parked = await f.db.db
      .selectFrom('workflow_events')
      .select(['seq', 'payload'])
      .where('workflow_id', '=', workflowId)
      .where('seq', '>', last)
      .execute();
    const events = parked.map((e) => e.payload as unknown as WorkflowEvent);
    expect(events.map((e) => [e.state, e.terminal])).toEqual([['needs_reconciliation', true]]);
    expect(events[0]!.pendingApprovals).toEqual([]);
    expect(events[0]!.actions.map((a) => a.status)).toEqual(['superseded', 'failed_unknown']);
  });
});
