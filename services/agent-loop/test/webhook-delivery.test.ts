import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { inTransaction, recordWorkflowEvent } from '@gatehouse/ledger';
import { createLogger, sealWebhookSecret, webhookSecretKey } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, freePort, type TestDatabase } from '@gatehouse/test-harness';
import { readWebhookTestHooks, retryDelayMs, WebhookDeliveryWorker, type WebhookTestHooks } from '../src/jobs/webhook-delivery.worker.ts';

/**
 * The webhook outbox against real Postgres and a real HTTP receiver (node:http): signatures,
 * dedup by delivery id, a receiver that refuses connections for a while, order per workflow,
 * and the two control-removed switches (docs/decisions/0250-pushed-workflow-events.md).
 * Run with `GATEHOUSE_ENV=test GATEHOUSE_TEST_WEBHOOK_NO_RETRY=1` (or `…_UNSIGNED=1`) the first
 * test fails: the controls are load-bearing.
 */
let t: TestDatabase;
const log = createLogger('webhook-test');

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});
afterEach(async () => {
  // Each test's endpoint only sees its own workflows' events.
  await t.db.updateTable('webhook_endpoints').set({ disabled_at: new Date() }).where('disabled_at', 'is', null).execute();
});

interface Received {
  id: string;
  seq: number;
  workflowId: string;
  verified: boolean;
}

/** A receiver on `port` that verifies every request with `secret`, answers 2xx only when verified, and records all. */
class Receiver {
  readonly got: Received[] = [];
  server: Server | undefined;
  readonly port: number;
  readonly secret: string;
  constructor(port: number, secret: string) {
    this.port = port;
    this.secret = secret;
  }
  async up(): Promise<void> {
    this.server = createServer((req: IncomingMessage, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        let verified = true;
        try {
          new Webhook(this.secret).verify(body, req.headers as Record<string, string>);
        } catch {
          verified = false;
        }
        const e = JSON.parse(body) as { seq: number; workflowId: string };
        this.got.push({ id: String(req.headers['webhook-id']), seq: e.seq, workflowId: e.workflowId, verified });
        res.writeHead(verified ? 204 : 401).end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(this.port, '127.0.0.1', r));
  }
  async down(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    s?.closeAllConnections();
    await new Promise<void>((r) => (s ? s.close(() => r()) : r()));
  }
  /** Verified events after dedup by `webhook-id`, in first-arrival order. */
  accepted(): Received[] {
    const seen = new Set<string>();
    return this.got.filter((g) => g.verified && !seen.has(g.id) && seen.add(g.id));
  }
}

const SECRET = `whsec_${Buffer.from('a'.repeat(32)).toString('base64')}`;

async function endpoint(tenant: string, url: string, secret = SECRET): Promise<string> {
  const row = await t.db
    .insertInto('webhook_endpoints')
    .values({ tenant, url, secret, created_by: 'ops-gus' })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

/** A run of `tenant` (quillfeather or northwind) with `n` workflow events recorded; returns its id. */
async function workflowWithEvents(n: number, tenant: 'quillfeather' | 'northwind' = 'quillfeather'): Promise<string> {
  const a = await createAction(t.db, {
    tool: 'reship_order',
    orderId: tenant === 'northwind' ? 'O-2001' : 'O-1001',
    release: 'rel-1',
    decision: 'ALLOW',
    ruleId: 'ALL',
    approved: true,
    workflowState: 'executing',
    tenant,
  });
  for (let i = 0; i < n; i++) await inTransaction(t.db, (trx) => recordWorkflowEvent(trx, a.workflowId, 'executing'));
  return a.workflowId;
}

function worker(hooks: WebhookTestHooks, over: Partial<ConstructorParameters<typeof WebhookDeliveryWorker>[0]> = {}) {
  return new WebhookDeliveryWorker({
    db: t.db,
    log,
    pollMs: 50,
    maxAttempts: 50,
    maxAgeMs: 60_000,
    retryBaseMs: 50,
    retryMaxMs: 400,
    timeoutMs: 2000,
    production: false,
    hooks,
    ...over,
  });
}

/**
 * A receiver on `port` that holds every request open until {@link HangingReceiver.answerAll}:
 * a tenant's endpoint that never answers. Counts the requests open now and at most.
 */
class HangingReceiver {
  open = 0;
  maxOpen = 0;
  readonly #held: Array<() => void> = [];
  readonly #server = createServer((req, res) => {
    this.maxOpen = Math.max(this.maxOpen, ++this.open);
    req.resume();
    res.on('close', () => this.open--);
    this.#held.push(() => res.writeHead(204).end());
  });
  get held(): number {
    return this.#held.length;
  }
  async up(port: number): Promise<void> {
    await new Promise<void>((r) => this.#server.listen(port, '127.0.0.1', r));
  }
  /** Answers 204 to every request held now. */
  answerAll(): void {
    for (const answer of this.#held.splice(0)) answer();
  }
  async down(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

async function until(cond: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Every delivery of `endpointId` finished (delivered or failed). */
const settled = (endpointId: string) => async () =>
  !(await t.db
    .selectFrom('webhook_deliveries')
    .select('id')
    .where('endpoint_id', '=', endpointId)
    .where('status', '=', 'pending')
    .executeTakeFirst());

/** Answers the hanging receiver until every delivery of `endpointId` is settled, then stops `w` and the receiver. */
async function drainHanging(w: WebhookDeliveryWorker, slow: HangingReceiver, endpointId: string): Promise<void> {
  await until(async () => {
    slow.answerAll();
    return settled(endpointId)();
  });
  await w.stop();
  await slow.down();
}

/** Ticks `w` until every delivery of `endpointId` is settled, stops it and returns the (first) delivery row. */
async function settleAndStop(w: WebhookDeliveryWorker, endpointId: string) {
  try {
    await until(async () => {
      await w.tick();
      return settled(endpointId)();
    });
  } finally {
    await w.stop();
  }
  return t.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', endpointId).executeTakeFirstOrThrow();
}

describe('webhook deliveries (outbox, real receiver)', () => {
  it('a receiver down for a while still gets every event exactly once after dedup, in order, signed', async () => {
    const port = await freePort();
    const rx = new Receiver(port, SECRET);
    const ep = await endpoint('quillfeather', `http://127.0.0.1:${port}/hook`);
    const wfA = await workflowWithEvents(4);
    const wfB = await workflowWithEvents(3);
    // The hooks come from the environment: a control-removed run of this test must fail.
    const w = worker(readWebhookTestHooks(process.env), { maxAttempts: 10 });
    w.start();
    // Down: connections refused; each workflow's first event is retried (later ones wait behind it, in order).
    await until(async () => {
      const r = await t.db.selectFrom('webhook_deliveries').select(['attempts', 'status']).where('endpoint_id', '=', ep).execute();
      return r.filter((x) => x.attempts >= 2).length >= 2 || r.every((x) => x.status !== 'pending');
    });
    const refused = await t.db.selectFrom('webhook_deliveries').select('last_error').where('endpoint_id', '=', ep).execute();
    expect(refused.some((x) => x.last_error === 'ECONNREFUSED')).toBe(true);
    await rx.up();
    await until(settled(ep));
    await w.stop();
    await rx.down();
    const rows = await t.db.selectFrom('webhook_deliveries').select(['status', 'last_error']).where('endpoint_id', '=', ep).execute();
    expect(rows.map((r) => r.status)).toEqual(Array(7).fill('delivered'));
    const accepted = rx.accepted();
    expect(rx.got.every((g) => g.verified)).toBe(true);
    for (const [wf, n] of [
      [wfA, 4],
      [wfB, 3],
    ] as const) {
      expect(accepted.filter((g) => g.workflowId === wf).map((g) => g.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    }
  });

  it('a delivery id is stable across retries; a 5xx is retried; a delivery past its attempts is failed, never dropped', async () => {
    const port = await freePort();
    const ids: string[] = [];
    let answer = 500;
    const server = createServer((req, res) => {
      ids.push(String(req.headers['webhook-id']));
      req.resume();
      req.on('end', () => res.writeHead(answer).end());
    });
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
    const ep = await endpoint('quillfeather', `http://127.0.0.1:${port}/x`);
    await workflowWithEvents(1);
    const w = worker({ unsigned: false, noRetry: false }, { maxAttempts: 3 });
    await until(async () => {
      await w.tick();
      return settled(ep)();
    });
    const row = await t.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', ep).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'failed', attempts: 3, last_error: 'HTTP 500' });
    expect(ids).toEqual([row.id, row.id, row.id]);
    answer = 200;
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it('a sealed secret is opened to sign (ADR 0550); one sealed under another key or moved to another endpoint fails the attempt, never sent unsigned', async () => {
    const key = webhookSecretKey('a-production-key-of-at-least-32-bytes!!');
    const port = await freePort();
    const rx = new Receiver(port, SECRET);
    await rx.up();
    try {
      const url = `http://127.0.0.1:${port}/sealed`;
      const sealed = await endpoint('quillfeather', url, sealWebhookSecret(SECRET, key, { tenant: 'quillfeather', url }));
      const otherKey = await endpoint(
        'quillfeather',
        `${url}-k`,
        sealWebhookSecret(SECRET, webhookSecretKey('another-key-of-at-least-32-bytes!!!!!'), { tenant: 'quillfeather', url: `${url}-k` }),
      );
      // Copied from the first endpoint's row: sealed for another URL.
      const moved = await endpoint('quillfeather', `${url}-m`, sealWebhookSecret(SECRET, key, { tenant: 'quillfeather', url }));
      await workflowWithEvents(1);
      const w = worker({ unsigned: false, noRetry: true }, { secretKey: key });
      await until(async () => {
        await w.tick();
        return (await settled(sealed)()) && (await settled(otherKey)()) && (await settled(moved)());
      });
      const status = async (ep: string) =>
        t.db.selectFrom('webhook_deliveries').select(['status', 'last_error']).where('endpoint_id', '=', ep).executeTakeFirstOrThrow();
      expect(await status(sealed)).toMatchObject({ status: 'delivered', last_error: null });
      expect((await status(otherKey)).last_error).toMatch(
        /^secret unreadable: webhook secret sealed under key [0-9a-f]{8}, not the configured key/,
      );
      expect((await status(moved)).last_error).toMatch(/^secret unreadable: webhook secret does not open/);
      // Only the sealed endpoint's delivery reached the receiver, verified.
      expect(rx.got.map((g) => g.verified)).toEqual([true]);
    } finally {
      await rx.down();
    }
  });

  it('a wrong secret or a changed body fails verification', async () => {
    const wh = new Webhook(SECRET);
    const now = new Date();
    const body = JSON.stringify({ seq: 1, state: 'completed' });
    const headers = {
      'webhook-id': 'd1',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': wh.sign('d1', now, body),
    };
    expect(wh.verify(body, headers)).toEqual({ seq: 1, state: 'completed' });
    const other = new Webhook(`whsec_${Buffer.from('b'.repeat(32)).toString('base64')}`);
    expect(() => other.verify(body, headers)).toThrow();
    expect(() => wh.verify(body.replace('completed', 'stopped'), headers)).toThrow();
    const old = { ...headers, 'webhook-timestamp': String(Math.floor(now.getTime() / 1000) - 3600) };
    expect(() => wh.verify(body, old)).toThrow(); // replay of an old delivery: the timestamp is signed
  });

  it("a tenant's receiver that never answers holds at most 4 attempts and does not delay another tenant's events", async () => {
    // quillfeather's receiver holds every request open; northwind's answers at once.
    const slow = new HangingReceiver();
    const slowPort = await freePort();
    await slow.up(slowPort);
    const fastPort = await freePort();
    const rx = new Receiver(fastPort, SECRET);
    await rx.up();
    const slowEp = await endpoint('quillfeather', `http://127.0.0.1:${slowPort}/hook`);
    const fastEp = await endpoint('northwind', `http://127.0.0.1:${fastPort}/hook`);
    for (let i = 0; i < 10; i++) await workflowWithEvents(1); // ten deliveries to the slow receiver
    await workflowWithEvents(3, 'northwind');
    const w = worker(readWebhookTestHooks(process.env), { timeoutMs: 60_000 });
    w.start();
    try {
      // Northwind's three events go one after another (in order), all while quillfeather's receiver has answered nothing.
      await until(settled(fastEp), 20_000);
      expect(slow.held).toBeGreaterThan(0);
      expect(rx.accepted().map((g) => g.seq)).toEqual([1, 2, 3]);
      expect(slow.maxOpen).toBeLessThanOrEqual(4);
    } finally {
      await drainHanging(w, slow, slowEp);
      await rx.down();
    }
  });

  it('an endpoint with attempts already in flight is topped up to 4, not given 4 more', async () => {
    const slow = new HangingReceiver();
    const port = await freePort();
    await slow.up(port);
    const ep = await endpoint('quillfeather', `http://127.0.0.1:${port}/hook`);
    await workflowWithEvents(1);
    const w = worker(readWebhookTestHooks(process.env), { timeoutMs: 60_000 });
    w.start();
    try {
      await until(async () => slow.open === 1);
      // Nine more deliveries become due in one commit while one attempt is in flight.
      const runs = await Promise.all(Array.from({ length: 9 }, () => workflowWithEvents(0)));
      await inTransaction(t.db, async (trx) => {
        for (const id of runs) await recordWorkflowEvent(trx, id, 'executing');
      });
      await until(async () => slow.open >= 4);
      await new Promise((r) => setTimeout(r, 500)); // ten more passes
      expect(slow.maxOpen).toBe(4);
    } finally {
      await drainHanging(w, slow, ep);
    }
  });

  it('production: a host that resolves to a private address is refused before anything is sent (ADR 0671)', async () => {
    const port = await freePort();
    const rx = new Receiver(port, SECRET);
    await rx.up();
    // The name resolves to this machine, where a receiver listens: only the check keeps it out.
    const ep = await endpoint('quillfeather', `https://hooks.tenant.test:${port}/x`);
    await workflowWithEvents(1);
    const resolve = async (host: string) => (host === 'hooks.tenant.test' ? ['93.184.216.34', '127.0.0.1'] : []);
    const w = worker({ unsigned: false, noRetry: false }, { maxAttempts: 1, production: true, resolve });
    await until(async () => {
      await w.tick();
      return settled(ep)();
    });
    const row = await t.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', ep).executeTakeFirstOrThrow();
    expect(row).toMatchObject({
      status: 'failed',
      last_error: 'url refused: production delivers to public hosts only (hooks.tenant.test resolves to 127.0.0.1)',
    });
    expect(rx.got).toEqual([]);
    await rx.down();
  });

  it("production: a host name that does not resolve is refused with the resolver's reason (ADR 0671)", async () => {
    const ep = await endpoint('quillfeather', 'https://gone.tenant.test/x');
    await workflowWithEvents(1);
    const resolve = async (name: string): Promise<string[]> => {
      throw new Error(`getaddrinfo ENOTFOUND ${name}`);
    };
    const row = await settleAndStop(worker({ unsigned: false, noRetry: false }, { maxAttempts: 1, production: true, resolve }), ep);
    expect(row).toMatchObject({
      status: 'failed',
      last_error: 'url refused: gone.tenant.test does not resolve (getaddrinfo ENOTFOUND gone.tenant.test)',
    });
  });

  it('production: a host name is resolved and checked once per attempt, as it connects, so the connection gets only the addresses checked; nothing reaches this machine (ADR 0671)', async () => {
    for (const connectUnchecked of [false, true]) {
      const { port, connections, close } = await countConnections();
      const host = `rebind-${connectUnchecked}.tenant.test`;
      const ep = await endpoint('quillfeather', `https://${host}:${port}/x`);
      await workflowWithEvents(1);
      // The name resolves to this machine; every resolution is counted (one check, no second look-up to differ from it).
      let asked = 0;
      const resolve = async (name: string) => (name !== host ? [] : (asked++, ['127.0.0.1']));
      const w = worker({ unsigned: false, noRetry: false, connectUnchecked }, { maxAttempts: 1, production: true, resolve });
      const row = await settleAndStop(w, ep).finally(close);
      expect(row.status).toBe('failed');
      expect(asked).toBe(1);
      if (connectUnchecked) {
        // Control removed: the connection goes where the name resolves, to this machine.
        expect(connections()).toBeGreaterThan(0);
      } else {
        expect(row.last_error).toBe(`url refused: production delivers to public hosts only (${host} resolves to 127.0.0.1)`);
        expect(connections()).toBe(0);
      }
    }
  });

  it('backoff doubles up to its ceiling, jittered over the upper half', () => {
    expect([1, 2, 3, 4, 10].map((n) => retryDelayMs(n, 1000, 5000, () => 1))).toEqual([1000, 2000, 4000, 5000, 5000]);
    expect([1, 2, 3].map((n) => retryDelayMs(n, 1000, 5000, () => 0))).toEqual([500, 1000, 2000]);
  });
});

describe('control removed (GATEHOUSE_TEST_WEBHOOK_*)', () => {
  it('without signing the receiver refuses every delivery', async () => {
    const port = await freePort();
    const rx = new Receiver(port, SECRET);
    await rx.up();
    const ep = await endpoint('northwind', `http://127.0.0.1:${port}/hook`);
    await workflowWithEvents(1, 'northwind');
    const w = worker(readWebhookTestHooks({ GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_WEBHOOK_UNSIGNED: '1' }), { maxAttempts: 2 });
    await until(async () => {
      await w.tick();
      return settled(ep)();
    });
    await rx.down();
    expect(rx.got.length).toBeGreaterThan(0);
    expect(rx.accepted()).toEqual([]);
  });

  it('without retries a receiver that was down misses events for good', async () => {
    const port = await freePort();
    const ep = await endpoint('northwind', `http://127.0.0.1:${port}/hook`);
    await workflowWithEvents(1, 'northwind');
    const w = worker(readWebhookTestHooks({ GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_WEBHOOK_NO_RETRY: '1' }));
    await until(async () => {
      await w.tick();
      return settled(ep)();
    });
    const rows = await t.db.selectFrom('webhook_deliveries').select(['status', 'attempts']).where('endpoint_id', '=', ep).execute();
    expect(rows).toEqual([{ status: 'failed', attempts: 1 }]);
  });

  it('the switches are refused outside GATEHOUSE_ENV=test', () => {
    expect(() => readWebhookTestHooks({ GATEHOUSE_ENV: 'production', GATEHOUSE_TEST_WEBHOOK_UNSIGNED: '1' })).toThrow(/GATEHOUSE_ENV=test/);
    expect(() => readWebhookTestHooks({ GATEHOUSE_ENV: 'local', GATEHOUSE_TEST_WEBHOOK_NO_RETRY: '1' })).toThrow(/GATEHOUSE_ENV=test/);
  });
});

/** A TCP listener on 127.0.0.1 that only counts the connections it is offered (any protocol). */
async function countConnections(): Promise<{ port: number; connections: () => number; close: () => Promise<void> }> {
  let n = 0;
  const server = createTcpServer((socket) => {
    n++;
    socket.destroy();
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { port, connections: () => n, close: () => new Promise<void>((r) => server.close(() => r())) };
}
