import { randomInt } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import type { Server } from 'node:http';
import type { Selectable } from 'kysely';
import { createDb, type DB, type Db } from '@gatehouse/ledger';
import { setDeadlockTimeout } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import {
  closeServer,
  createLogger,
  createRedis,
  listen,
  OutboxRelay,
  QueueRegistry,
  type Logger,
} from '../../../packages/platform/src/index.ts';
import {
  createStagingApp,
  ensureStagingSchema,
  openStagingDatabase,
  type FaultSpec,
  type RecordedRequest,
  type StagingDb,
} from '@gatehouse/staging';
import { newDelegationKeyPair, type DelegationSigningKey, type JSONWebKeySet } from '../../../packages/credentials/src/index.ts';
import { readTestHooks, type ExecutionDeps } from '@gatehouse/executor';
import { loadActiveBundles, type PolicyBundles, type SupportBundle } from '../../../packages/policy/src/index.ts';

export const AUDIT_HMAC_KEY = 'local-audit-hmac-key-change-me';
export const RELEASE = 'rel-1';
export const EXECUTIONS_QUEUE = `executions.${RELEASE}`;
export const RESULTS_QUEUE = `results.${RELEASE}`;

/** The active support policy (support-p1), as the executor loads it at boot. */
export const BUNDLES: PolicyBundles = loadActiveBundles({ support: 'support-p1', change: 'change-c1' });
export const SUPPORT_BUNDLE: SupportBundle = BUNDLES.support;

/** One test file's world: its database, queue prefix, an in-process staging app and the executor's deps. */
export interface Harness {
  tdb: TestDatabase;
  /** Ledger handle with a pool large enough for 8 concurrent executions. */
  db: Db;
  staging: StagingDb;
  stagingUrl: string;
  prefix: string;
  queues: QueueRegistry;
  relay: OutboxRelay;
  log: Logger;
  deps: (overrides?: Partial<ExecutionDeps>) => ExecutionDeps;
  /** The executor's delegation key pair: its signing key and the JWKS staging verifies with. */
  delegationKeys: { signing: DelegationSigningKey; jwks: JSONWebKeySet };
  /** The signing key as a PEM file, for executors started as processes. */
  delegationKeyPath: string;
  /** A fresh shipped order of quillfeather/US (a clone of world.json's O-1002 under a new id). */
  newOrder: (paidCents?: number) => Promise<string>;
  arm: (spec: FaultSpec) => Promise<void>;
  requests: (orderId: string) => Promise<RecordedRequest[]>;
  refunds: (orderId: string) => Promise<Array<{ refundId: string; idempotencyKey: string; amountCents: number }>>;
  shipments: (orderId: string) => Promise<unknown[]>;
  /** Highest fencing token stored with the refund of `key` in the payments ledger (null: none). */
  refundFence: (key: string) => Promise<number | null>;
  /** The ledger's row of run `id`. @throws NoResultError when there is none. */
  workflow: (id: string) => Promise<Selectable<DB['workflows']>>;
  /** The ledger's row of approval `id`. @throws NoResultError when there is none (or `id` is null). */
  approval: (id: string | null) => Promise<Selectable<DB['approvals']>>;
  close: () => Promise<void>;
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url} → ${res.status}`);
  return (await res.json()) as T;
}

/** Starts the harness: migrated test database, staging schema and app on an ephemeral port, Redis queues. */
export async function startHarness(opts: { poolSize?: number; deadlockTimeoutMs?: number } = {}): Promise<Harness> {
  const tdb = await createTestDatabase();
  if (opts.deadlockTimeoutMs !== undefined) await setDeadlockTimeout(tdb.db, tdb.name, opts.deadlockTimeoutMs);
  const db = createDb(tdb.url, opts.poolSize ?? 12);
  await db.insertInto('audit_heartbeat').values({ id: 1, beat_at: new Date() }).execute();
  const { db: staging } = openStagingDatabase(tdb.url, { maxConnections: 8 });
  await ensureStagingSchema(staging);
  const log = createLogger('executor-test');
  log.level = process.env.TEST_LOG_LEVEL ?? 'silent';
  const delegationKeys = await newDelegationKeyPair();
  const delegationKeyPath = resolve(mkdtempSync(resolve(tmpdir(), 'gh-delegation-')), 'delegation-ed25519.pem');
  writeFileSync(delegationKeyPath, delegationKeys.signing.key.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  const { app } = createStagingApp({ db: staging, delegationJwks: delegationKeys.jwks, log });
  const { server, port } = await listen(app, 0);
  const stagingUrl = `http://127.0.0.1:${port}`;
  const prefix = testQueuePrefix();
  const redis = createRedis(TEST_REDIS_URL);
  const queues = new QueueRegistry(redis, prefix);
  const relay = new OutboxRelay(db, queues, log);
  const base: ExecutionDeps = {
    db,
    relay,
    log,
    stagingUrl,
    signingKey: delegationKeys.signing,
    auditHmacKey: AUDIT_HMAC_KEY,
    leaseMs: 5000,
    deadlineMs: 10_000,
    agentId: 'support-agent',
    // Every test switch off (GATEHOUSE_TEST_* unset); a test turns one on in its own deps.
    hooks: readTestHooks({}),
    bundles: BUNDLES,
    // No audit service runs here: a heartbeat is written at start and the gate is wide.
    auditGate: { maxHeartbeatAgeMs: 3_600_000, maxBacklogAgeMs: 3_600_000 },
    outagePolicy: { ceilingMs: 15 * 60_000, credit: true },
  };
  return {
    tdb,
    db,
    staging,
    stagingUrl,
    prefix,
    queues,
    relay,
    log,
    deps: (overrides = {}) => ({ ...base, ...overrides }),
    delegationKeys,
    delegationKeyPath,
    workflow: (id) => db.selectFrom('workflows').selectAll().where('id', '=', id).executeTakeFirstOrThrow(),
    approval: (id) =>
      db
        .selectFrom('approvals')
        .selectAll()
        .where('id', '=', id ?? '')
        .executeTakeFirstOrThrow(),
    newOrder: async (paidCents = 50_000) => {
      const id = `O-${randomInt(100_000, 999_999)}${randomInt(0, 9)}`;
      await staging
        .insertInto('staging.orders')
        .values({ id, tenant: 'quillfeather', region: 'US', customer: 'cust-2', paid_cents: paidCents, status: 'shipped' })
        .execute();
      return id;
    },
    arm: async (spec) => {
      const res = await fetch(`${stagingUrl}/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(spec),
      });
      if (res.status !== 201) throw new Error(`POST /faults → ${res.status}`);
    },
    requests: async (orderId) =>
      (await getJson<{ requests: RecordedRequest[] }>(`${stagingUrl}/requests?orderId=${encodeURIComponent(orderId)}`)).requests,
    refunds: async (orderId) =>
      (
        await getJson<{ refunds: Array<{ refundId: string; idempotencyKey: string; amountCents: number }> }>(
          `${stagingUrl}/ledger/refunds?orderId=${encodeURIComponent(orderId)}`,
        )
      ).refunds,
    shipments: async (orderId) =>
      (await getJson<{ shipments: unknown[] }>(`${stagingUrl}/orders/${encodeURIComponent(orderId)}/shipments`)).shipments,
    refundFence: async (key) => {
      const r = await staging.selectFrom('staging.refunds').select('fencing_token').where('idempotency_key', '=', key).executeTakeFirst();
      return r?.fencing_token == null ? null : Number(r.fencing_token);
    },
    close: async () => {
      await relay.stop();
      await queues.close();
      redis.disconnect();
      await stopServer(server);
      await staging.destroy();
      await db.destroy();
      await dropQueuePrefix(TEST_REDIS_URL, prefix);
      await tdb.drop();
    },
  };
}

async function stopServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await closeServer(server);
}

/** Audit events of one type written for a workflow, or for all when `runId` is null (`audit_outbox`, before chaining). */
export async function auditEvents(db: Db, type: string, runId: string | null): Promise<Array<Record<string, unknown>>> {
  const rows = await db.selectFrom('audit_outbox').select('event').orderBy('id').execute();
  return rows.map((r) => r.event as Record<string, unknown>).filter((e) => e.type === type && (runId === null || e.runId === runId));
}

/** Polls `fn` every `everyMs` until it returns a truthy value or `timeoutMs` passes (then throws with `what`). */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | null | undefined | false>,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
