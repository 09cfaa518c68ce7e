import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { lookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { isIPv6, type LookupFunction } from 'node:net';
import { Agent, fetch as undiciFetch } from 'undici';
import { nonPublicAddress, WEBHOOK_ENDPOINT_DISABLED, WEBHOOK_HEADERS, webhookUrlProblem, testFaults } from '@gatehouse/contracts';
import { inTransaction, type Db } from '@gatehouse/ledger';
import { localWebhookSecretKey, openWebhookSecret, type Logger, type WebhookSecretKey } from '@gatehouse/platform';

/** Settings of the webhook delivery worker (agent-loop env `WEBHOOK_*`). */
export interface WebhookDeliveryConfig {
  db: Db;
  log: Logger;
  /** How often due deliveries are looked for, ms. */
  pollMs: number;
  /** Attempts before a delivery is `failed` (the first one included). */
  maxAttempts: number;
  /** Age after which a delivery that still fails is `failed`, ms. */
  maxAgeMs: number;
  /** Backoff of the first retry, ms; doubles per attempt, up to `retryMaxMs`, with full jitter over its upper half. */
  retryBaseMs: number;
  retryMaxMs: number;
  /** One attempt's time limit (connect to response headers), ms. */
  timeoutMs: number;
  /** Production: https endpoints on public hosts only (docs/decisions/0671-webhooks-reach-public-hosts-only.md). */
  production: boolean;
  /** Resolves a host name to its addresses (default: the system resolver, every address). */
  resolve?: (host: string) => Promise<string[]>;
  hooks: WebhookTestHooks;
  /** Opens the endpoints' sealed signing secrets (default: the local key; ADR 0550). */
  secretKey?: WebhookSecretKey;
}

/** Control-removed switches (GATEHOUSE_ENV=test only). */
export interface WebhookTestHooks {
  /** `GATEHOUSE_TEST_WEBHOOK_UNSIGNED=1`: no `webhook-signature` header is sent. */
  unsigned: boolean;
  /** `GATEHOUSE_TEST_WEBHOOK_NO_RETRY=1`: the first failed attempt marks the delivery `failed`. */
  noRetry: boolean;
  /**
   * `GATEHOUSE_TEST_WEBHOOK_CONNECT_UNCHECKED=1`: a production attempt connects to whatever the
   * host resolves to, unchecked (only the URL rule, `webhookUrlProblem`, stands).
   */
  connectUnchecked?: boolean;
}

/**
 * Reads the worker's test switches from `env`.
 * @throws Error when one is set outside `GATEHOUSE_ENV=test` (docs/decisions/0016-test-only-hooks.md).
 */
export function readWebhookTestHooks(env: Record<string, string | undefined>): WebhookTestHooks {
  const faults = testFaults(env);
  return { unsigned: faults.webhookUnsigned, noRetry: faults.webhookNoRetry, connectUnchecked: faults.webhookConnectUnchecked };
}

/** Delay before attempt `attempts + 1`, ms: `min(max, base·2^(attempts−1))`, jittered uniformly over its upper half. */
export function retryDelayMs(attempts: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempts - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

interface Claimed {
  id: string;
  endpoint_id: string;
  url: string;
  tenant: string;
  /** As stored: sealed (ADR 0550), or a plain `whsec_` secret of a row stored before sealing. */
  secret: string;
  body: string;
  attempts: number;
  created_at: Date;
  disabled_at: Date | null;
}

/** Attempts one process runs at once, over every endpoint. */
const MAX_IN_FLIGHT = 20;
/** Attempts one process runs at once to one endpoint: a slow receiver holds no more slots than this. */
const PER_ENDPOINT_IN_FLIGHT = 4;

/**
 * Delivers the webhook outbox (docs/decisions/0250-pushed-workflow-events.md): every `pollMs`
 * it claims due `pending` deliveries — at most one per (endpoint, workflow) at a time and only
 * the lowest seq, so a receiver sees a workflow's events in order; at most 20 attempts in flight
 * per process and 4 per endpoint, none waiting for another, so a receiver that hangs until the
 * timeout delays no other tenant's events — under a lease (`FOR UPDATE
 * SKIP LOCKED`, so replicas share the work), and POSTs the stored body with `webhook-id` (the
 * delivery id, the same on every attempt), `webhook-timestamp` and `webhook-signature`
 * (`v1,` base64 HMAC-SHA256 of `id.timestamp.body` with the endpoint's secret, Standard
 * Webhooks). A 2xx marks it `delivered`; anything else is retried with exponential backoff and
 * jitter until `maxAttempts` or `maxAgeMs`, then marked `failed` with the last error (listed by
 * the ops API), never dropped; so is a pending one whose endpoint was disabled. A crash mid-attempt leaves the lease to expire: the delivery is
 * sent again with the same id.
 */
export class WebhookDeliveryWorker {
  readonly #cfg: WebhookDeliveryConfig;
  #timer: NodeJS.Timeout | undefined;
  #claiming: Promise<unknown> | undefined;
  /** Attempts in progress in this process, by delivery id, with their endpoint. */
  readonly #inFlight = new Map<string, { endpointId: string; done: Promise<void> }>();
  /** Production: the connections of attempts, made only to addresses checked public as they connect (ADR 0671); undefined elsewhere. */
  readonly #connections: Agent | undefined;

  constructor(cfg: WebhookDeliveryConfig) {
    this.#cfg = cfg;
    const resolve = cfg.resolve ?? resolveAll;
    this.#connections = cfg.production
      ? new Agent({ connect: { lookup: connectLookup(resolve, { checked: !cfg.hooks.connectUnchecked }) } })
      : undefined;
  }

  /**
   * Starts the loop: every `pollMs` it claims what there is room for and starts those attempts
   * without waiting for earlier ones, so one endpoint that answers slowly (or never, until the
   * timeout) holds at most {@link PER_ENDPOINT_IN_FLIGHT} slots and never delays other endpoints.
   */
  start(): void {
    this.#timer = setInterval(() => {
      if (!this.#claiming) this.#claiming = this.#claimAndStart().finally(() => (this.#claiming = undefined));
    }, this.#cfg.pollMs);
  }

  /** Stops the loop, waits for the attempts in progress and closes their connections. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#claiming;
    await Promise.all([...this.#inFlight.values()].map((f) => f.done));
    await this.#connections?.close();
  }

  /** One pass, awaited whole (tests): claims due deliveries and attempts each. Never throws. */
  async tick(): Promise<number> {
    const started = await this.#claimAndStart();
    await Promise.all(started);
    return started.length;
  }

  /** Claims what there is room for and starts each attempt; returns them. Never throws (a ledger fault is logged; the next pass retries). */
  async #claimAndStart(): Promise<Array<Promise<void>>> {
    try {
      const claimed = await this.#claim();
      return claimed.map((d) => {
        const done = this.#attempt(d)
          .catch((err: unknown) => this.#cfg.log.warn({ delivery: d.id, err: (err as Error).message }, 'webhook attempt not recorded'))
          .finally(() => this.#inFlight.delete(d.id));
        this.#inFlight.set(d.id, { endpointId: d.endpoint_id, done });
        return done;
      });
    } catch (err) {
      this.#cfg.log.warn({ err: (err as Error).message }, 'webhook delivery pass failed');
      return [];
    }
  }

  /**
   * Claims due deliveries under a lease: at most {@link MAX_IN_FLIGHT} in flight in this process,
   * at most {@link PER_ENDPOINT_IN_FLIGHT} per endpoint counting those already in flight here
   * (their lease makes them not due, so the claim is told how many), and per (endpoint,
   * workflow) only the lowest pending seq.
   */
  async #claim(): Promise<Claimed[]> {
    const room = MAX_IN_FLIGHT - this.#inFlight.size;
    if (room <= 0) return [];
    const perEndpoint = new Map<string, number>();
    for (const f of this.#inFlight.values()) perEndpoint.set(f.endpointId, (perEndpoint.get(f.endpointId) ?? 0) + 1);
    const endpoints = [...perEndpoint.keys()];
    const inFlight = endpoints.map((id) => perEndpoint.get(id)!);
    const leaseMs = this.#cfg.timeoutMs + 5_000;
    return inTransaction(this.#cfg.db, async (trx) => {
      const due = await sql<Claimed>`
        SELECT d.id, d.endpoint_id, e.url, e.tenant, e.secret, d.body, d.attempts, d.created_at, e.disabled_at
        FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
        WHERE d.id IN (
          SELECT x.id FROM (
            SELECT c.id, c.endpoint_id, row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.next_attempt_at) AS rn
            FROM webhook_deliveries c
            WHERE c.status = 'pending' AND c.next_attempt_at <= now()
              AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p
                WHERE p.endpoint_id = c.endpoint_id AND p.workflow_id = c.workflow_id
                  AND p.status = 'pending' AND p.event_seq < c.event_seq)
          ) x LEFT JOIN unnest(${endpoints}::uuid[], ${inFlight}::int[]) AS busy(endpoint_id, n) ON busy.endpoint_id = x.endpoint_id
          WHERE x.rn <= ${PER_ENDPOINT_IN_FLIGHT} - coalesce(busy.n, 0))
        ORDER BY d.next_attempt_at LIMIT ${room}
        FOR UPDATE OF d SKIP LOCKED`.execute(trx);
      if (!due.rows.length) return [];
      await trx
        .updateTable('webhook_deliveries')
        .set({ attempts: sql`attempts + 1`, next_attempt_at: sql`now() + ${`${leaseMs} milliseconds`}::interval` })
        .where(
          'id',
          'in',
          due.rows.map((r) => r.id),
        )
        .execute();
      return due.rows.map((r) => ({ ...r, attempts: r.attempts + 1 }));
    });
  }

  async #attempt(d: Claimed): Promise<void> {
    const error = d.disabled_at ? WEBHOOK_ENDPOINT_DISABLED : await this.#post(d);
    const db = this.#cfg.db;
    if (!error) {
      await db
        .updateTable('webhook_deliveries')
        .set({ status: 'delivered', finished_at: new Date(), last_error: null })
        .where('id', '=', d.id)
        .execute();
      return;
    }
    const age = Date.now() - new Date(d.created_at).getTime();
    const give = !!d.disabled_at || this.#cfg.hooks.noRetry || d.attempts >= this.#cfg.maxAttempts || age >= this.#cfg.maxAgeMs;
    if (give) {
      this.#cfg.log.warn({ delivery: d.id, attempts: d.attempts, error }, 'webhook delivery failed for good');
      await db
        .updateTable('webhook_deliveries')
        .set({ status: 'failed', finished_at: new Date(), last_error: error })
        .where('id', '=', d.id)
        .execute();
      return;
    }
    const delay = retryDelayMs(d.attempts, this.#cfg.retryBaseMs, this.#cfg.retryMaxMs);
    await db
      .updateTable('webhook_deliveries')
      .set({ last_error: error, next_attempt_at: new Date(Date.now() + delay) })
      .where('id', '=', d.id)
      .execute();
  }

  /** One POST; returns null on a 2xx, else what went wrong (status or network error, ≤ 200 chars). */
  async #post(d: Claimed): Promise<string | null> {
    // A host name is checked as the attempt connects (connectLookup): the one check, on the addresses connected to.
    const problem = webhookUrlProblem(d.url, this.#cfg.production);
    if (problem) return `url refused: ${problem}`;
    const now = new Date();
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'gatehouse-webhooks/1',
      [WEBHOOK_HEADERS.id]: d.id,
      [WEBHOOK_HEADERS.timestamp]: String(Math.floor(now.getTime() / 1000)),
    };
    if (!this.#cfg.hooks.unsigned) {
      // An unreadable secret (sealed under another key, altered) fails the attempt with its reason; nothing is sent unsigned.
      let secret: string;
      try {
        secret = openWebhookSecret(d.secret, this.#cfg.secretKey ?? localWebhookSecretKey(), d);
      } catch (err) {
        return `secret unreadable: ${(err as Error).message}`.slice(0, 200);
      }
      headers[WEBHOOK_HEADERS.signature] = new Webhook(secret).sign(d.id, now, d.body);
    }
    try {
      const init = { method: 'POST', headers, body: d.body, redirect: 'manual', signal: AbortSignal.timeout(this.#cfg.timeoutMs) } as const;
      const res = this.#connections ? await undiciFetch(d.url, { ...init, dispatcher: this.#connections }) : await fetch(d.url, init);
      await res.body?.cancel().catch(() => {});
      return res.status >= 200 && res.status < 300 ? null : `HTTP ${res.status}`;
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      return (e.cause?.code ?? e.cause?.message ?? e.message).slice(0, 200);
    }
  }
}

/** Every address the system resolver gives for `host` (an IP literal resolves to itself). */
async function resolveAll(host: string): Promise<string[]> {
  return (await lookup(host.replace(/^\[|\]$/g, ''), { all: true })).map((a) => a.address);
}

/**
 * Why a production attempt may not connect to `host` whose resolver answered `addresses` (the
 * attempt's error), or null: an address of this machine or a private network (unless `checked`
 * is false, the control-removed test) or no address at all.
 */
function refusal(host: string, addresses: string[], checked: boolean): string | null {
  const inside = checked ? addresses.find(nonPublicAddress) : undefined;
  if (inside) return `url refused: production delivers to public hosts only (${host} resolves to ${inside})`;
  return addresses.length === 0 ? `url refused: ${host} does not resolve` : null;
}

/** An error a connection's lookup hands back: its message is the attempt's error (no `code` to hide it). */
function lookupError(message: string): Error {
  return Object.assign(new Error(message), { code: undefined });
}

/**
 * A connection's host lookup (`net.connect`'s `lookup`): the one production check of a webhook
 * host name (ADR 0671). It resolves with `resolve` once per connection, refuses the connection
 * when any address is not public ({@link refusal}) and otherwise hands it exactly the addresses it
 * checked, so a name whose records change (DNS rebinding) never reaches this machine or a private
 * network. A refusal or a resolver failure is the attempt's error: `url refused: production
 * delivers to public hosts only (<host> resolves to <address>)`, `url refused: <host> does not
 * resolve (<reason>)`. Unchecked only in the control-removed test.
 */
function connectLookup(resolve: (host: string) => Promise<string[]>, opts: { checked: boolean }): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname).then(
      (addresses) => {
        const refused = refusal(hostname, addresses, opts.checked);
        if (refused) return callback(lookupError(refused), '', 0);
        const all: LookupAddress[] = addresses.map((address) => ({ address, family: isIPv6(address) ? 6 : 4 }));
        if (options.all) return (callback as (err: null, addresses: LookupAddress[]) => void)(null, all);
        return callback(null, all[0]!.address, all[0]!.family);
      },
      (err: Error) => callback(lookupError(`url refused: ${hostname} does not resolve (${err.message})`), '', 0),
    );
  };
}
