import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventSource } from 'eventsource';
import { Webhook } from 'standardwebhooks';
import { WorkflowEventSchema, type WorkflowEvent } from '@gatehouse/contracts';
import { pollWorkflow, tokenFor } from '@gatehouse/cli';
import { freePort } from '@gatehouse/test-harness';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';

/**
 * Pushed updates against every service as a process (docs/decisions/0250-pushed-workflow-events.md):
 * a real EventSource client follows a real workflow to its terminal state (its events made by the
 * agent loop, the policy gateway and the executor — other processes than the one holding the
 * stream), a reconnect with Last-Event-ID replays only later events, another tenant gets 404,
 * and a real receiver verifies every signed webhook, deduplicates by delivery id and, after being
 * down for a while, still has every event of a workflow once, in order.
 */
const SECRET = 'local-auth-secret-change-me';
let s: E2EStack;
let rep: string;
let ops: string;

interface Hook {
  id: string;
  event: WorkflowEvent;
  verified: boolean;
}

/** A webhook receiver on a fixed port that can go down (connections refused) and come back. */
class Receiver {
  readonly got: Hook[] = [];
  secret = '';
  port = 0;
  #server: Server | undefined;
  async up(): Promise<void> {
    this.port ||= await freePort();
    this.#server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        let verified = true;
        try {
          new Webhook(this.secret).verify(body, req.headers as Record<string, string>);
        } catch {
          verified = false;
        }
        this.got.push({ id: String(req.headers['webhook-id']), event: JSON.parse(body) as WorkflowEvent, verified });
        res.writeHead(verified ? 200 : 401).end();
      });
    });
    await new Promise<void>((r) => this.#server!.listen(this.port, '127.0.0.1', r));
  }
  async down(): Promise<void> {
    const srv = this.#server!;
    srv.closeAllConnections();
    await new Promise<void>((r) => srv.close(() => r()));
  }
  /** Verified events of `workflowId` after dedup by `webhook-id`, in arrival order. */
  seqsOf(workflowId: string): number[] {
    const seen = new Set<string>();
    return this.got
      .filter((h) => h.verified && h.event.workflowId === workflowId && !seen.has(h.id) && seen.add(h.id))
      .map((h) => h.event.seq);
  }
}
const rx = new Receiver();

beforeAll(async () => {
  s = await startE2EStack({
    EVENTS_HEARTBEAT_MS: '200',
    EVENTS_POLL_MS: '1000',
    WEBHOOK_POLL_MS: '100',
    WEBHOOK_RETRY_BASE_MS: '200',
    WEBHOOK_RETRY_MAX_MS: '1000',
  });
  rep = await tokenFor('rep-ana', SECRET);
  ops = await tokenFor('ops-gus', SECRET);
  await rx.up();
  const reg = await fetch(`${s.url('ops')}/api/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ops}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tenant: 'quillfeather', url: `http://127.0.0.1:${rx.port}/hooks` }),
  });
  expect(reg.status).toBe(201);
  rx.secret = ((await reg.json()) as { secret: string }).secret;
}, 300_000); // seven processes on a loaded 2-core machine start slowly
afterAll(async () => {
  await rx.down().catch(() => {});
  await s?.close();
});

async function submit(ticketId: string): Promise<string> {
  const res = await fetch(`${s.url('agent-loop')}/v1/tickets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${rep}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ticketId, text: 'What is the status of order O-1001?' }),
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { workflowId: string }).workflowId;
}

/** Follows a workflow with a real EventSource until its terminal event. */
function follow(workflowId: string): Promise<{ ids: string[]; events: WorkflowEvent[] }> {
  return new Promise((resolve, reject) => {
    const ids: string[] = [];
    const events: WorkflowEvent[] = [];
    const es = new EventSource(`${s.url('agent-loop')}/v1/workflows/${workflowId}/events`, {
      fetch: (url, init) => fetch(url, { ...init, headers: { ...init?.headers, authorization: `Bearer ${rep}` } }),
    });
    const timer = setTimeout(() => (es.close(), reject(new Error('no terminal event within 60 s'))), 60_000);
    es.addEventListener('workflow.updated', (m) => {
      ids.push(m.lastEventId);
      const e = WorkflowEventSchema.parse(JSON.parse(m.data));
      events.push(e);
      if (e.terminal) {
        clearTimeout(timer);
        es.close();
        resolve({ ids, events });
      }
    });
  });
}

/** One raw SSE request: status and the stream's blocks, read to its end. */
async function raw(workflowId: string, token: string, lastEventId?: string) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
  const res = await fetch(`${s.url('agent-loop')}/v1/workflows/${workflowId}/events`, { headers });
  const text = await res.text();
  const blocks = text.split('\n\n').filter(Boolean);
  const ids = blocks.flatMap((b) => /^id: (\d+)$/m.exec(b)?.[1] ?? []).map(Number);
  return { status: res.status, type: res.headers.get('content-type'), text, ids };
}

async function until(cond: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('GET /v1/workflows/:id/events (SSE) and signed webhooks, every service a process', () => {
  let wf = '';
  let all: WorkflowEvent[] = [];

  it('an EventSource follows a real workflow to its terminal state; ids are the ledger seq 1..n', async () => {
    wf = await submit('T-events-1');
    const rawFromStart = raw(wf, rep); // a second, raw client from the start: heartbeats and the end of the stream
    const { ids, events } = await follow(wf);
    all = events;
    expect(ids).toEqual(events.map((e) => String(e.seq)));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events[0]).toMatchObject({ state: 'received', previousState: null, terminal: false });
    expect(events.at(-1)).toMatchObject({ state: 'completed', terminal: true });
    expect(events.at(-1)!.actions).toEqual([expect.objectContaining({ tool: 'lookup_order', status: 'succeeded', decision: 'ALLOW' })]);
    // No tool arguments, no ticket or model text in an event (the schema is strict; the text is checked too).
    const view = (await (
      await fetch(`${s.url('agent-loop')}/v1/workflows/${wf}`, { headers: { authorization: `Bearer ${rep}` } })
    ).json()) as { finalMessage: string };
    expect(view.finalMessage.length).toBeGreaterThan(0);
    const text = JSON.stringify(events);
    expect(text).not.toContain('"arguments"');
    expect(text).not.toContain('status of order');
    expect(text).not.toContain(JSON.stringify(view.finalMessage).slice(1, -1));
    const db = await s.db.db.selectFrom('workflows').select(['state', 'event_seq']).where('id', '=', wf).executeTakeFirstOrThrow();
    expect(db).toEqual({ state: 'completed', event_seq: events.length });
    const r = await rawFromStart;
    expect(r.status).toBe(200);
    expect(r.type).toMatch(/^text\/event-stream/);
    expect(r.ids).toEqual(events.map((e) => e.seq)); // the server ended the stream after the terminal event
    expect(r.text).toContain(': heartbeat');
  });

  it('a reconnect with Last-Event-ID replays only later events; past the terminal one it is 204', async () => {
    const k = Math.floor(all.length / 2);
    const r = await raw(wf, rep, String(k));
    expect(r.status).toBe(200);
    expect(r.ids).toEqual(all.slice(k).map((e) => e.seq));
    expect((await raw(wf, rep, String(all.length))).status).toBe(204);
    expect((await raw(wf, rep, 'abc')).status).toBe(400);
    // The query form: once is read like the header; repeated is refused, never read as "from the start".
    const q = (query: string) =>
      fetch(`${s.url('agent-loop')}/v1/workflows/${wf}/events?${query}`, { headers: { authorization: `Bearer ${rep}` } });
    expect((await q(`lastEventId=${all.length}`)).status).toBe(204);
    for (const bad of [`lastEventId=${all.length}&lastEventId=${all.length}`, `lastEventId=1&lastEventId=2`]) {
      const res = await q(bad);
      expect(res.status, bad).toBe(400);
      expect(((await res.json()) as { error: { reason: string } }).error.reason).toBe('bad_last_event_id');
    }
  });

  it("another tenant's token gets 404, like the read; no token 401", async () => {
    const ivy = await tokenFor('rep-ivy', SECRET);
    expect((await raw(wf, ivy)).status).toBe(404);
    expect((await fetch(`${s.url('agent-loop')}/v1/workflows/${wf}`, { headers: { authorization: `Bearer ${ivy}` } })).status).toBe(404);
    expect((await fetch(`${s.url('agent-loop')}/v1/workflows/${wf}/events`)).status).toBe(401);
  });

  it('the receiver got every event of the workflow once after dedup, in order, each signature verified', async () => {
    await until(async () => rx.seqsOf(wf).length === all.length);
    expect(rx.seqsOf(wf)).toEqual(all.map((e) => e.seq));
    expect(rx.got.every((h) => h.verified)).toBe(true);
    // The body is the event the stream carried.
    const last = rx.got.find((h) => h.event.workflowId === wf && h.event.seq === all.length)!;
    expect(last.event).toEqual(all.at(-1));
  });

  it('a receiver that refuses connections for a while still gets every event exactly once, in order', async () => {
    await rx.down();
    const wf2 = await submit('T-events-2');
    await pollWorkflow(s.url('agent-loop'), rep, wf2, (v) => v.state === 'completed');
    await until(async () => {
      const rows = await s.db.db
        .selectFrom('webhook_deliveries')
        .select(['attempts', 'last_error'])
        .where('workflow_id', '=', wf2)
        .execute();
      return rows.some((r) => r.attempts >= 2 && r.last_error === 'ECONNREFUSED');
    });
    expect(rx.seqsOf(wf2)).toEqual([]);
    await rx.up();
    const n = (await s.db.db.selectFrom('workflows').select('event_seq').where('id', '=', wf2).executeTakeFirstOrThrow()).event_seq;
    await until(async () => rx.seqsOf(wf2).length === n);
    expect(rx.seqsOf(wf2)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    // The receiver answers before the delivery worker marks the row: wait for the marks, then assert.
    const allDelivered = async () =>
      (await s.db.db.selectFrom('webhook_deliveries').select('status').where('workflow_id', '=', wf2).execute()).every(
        (r) => r.status === 'delivered',
      );
    await until(allDelivered, 15_000).catch(() => undefined);
    expect(await allDelivered()).toBe(true);
    // The ops listing shows them; none failed.
    const listing = await fetch(`${s.url('ops')}/api/webhooks/deliveries?status=failed`, { headers: { authorization: `Bearer ${ops}` } });
    expect(((await listing.json()) as { deliveries: unknown[] }).deliveries).toEqual([]);
  });

  it('registration: operators only, http(s) URLs only, bearer token required, secret never listed', async () => {
    const post = (token: string, body: unknown) =>
      fetch(`${s.url('ops')}/api/webhooks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const lead = await tokenFor('lead-eli', SECRET);
    expect((await post(lead, { tenant: 'quillfeather', url: 'https://example.test/h' })).status).toBe(403);
    expect((await post(rep, { tenant: 'quillfeather', url: 'https://example.test/h' })).status).toBe(403);
    const bad = await post(ops, { tenant: 'quillfeather', url: 'file:///etc/passwd' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { reason: string } }).error.reason).toBe('invalid_webhook_url');
    expect((await post(ops, { tenant: 'nowhere', url: 'https://example.test/h' })).status).toBe(400);
    const list = await fetch(`${s.url('ops')}/api/webhooks`, { headers: { authorization: `Bearer ${ops}` } });
    const text = await list.text();
    expect(text).toContain(`127.0.0.1:${rx.port}`);
    expect(text).not.toContain('whsec_');
    // At rest the secret is sealed (ADR 0550): the row holds neither it nor any whsec_ value, and
    // the deliveries above were signed with it all the same (the agent-loop opened it).
    const rows = await s.db.db.selectFrom('webhook_endpoints').select('secret').execute();
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.secret).toMatch(/^sealed:v1:/);
      expect(r.secret).not.toContain(rx.secret.slice('whsec_'.length));
    }
  });
});
