import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { SERVICES, startStack, type RunningStack } from '@gatehouse/cli';
import type { Db } from '@gatehouse/ledger';
import {
  createTestDatabase,
  freePort,
  startPrivatePostgres,
  startPrivateRedis,
  type PrivatePostgres,
  type PrivateRedis,
  type TestDatabase,
} from '@gatehouse/test-harness';

/** A service process that ended without the harness asking it to. */
export interface Crash {
  service: string;
  code: number | null;
  signal: string | null;
  atMs: number;
}

/**
 * A whole stack as processes over a private Postgres cluster and a private Redis that the chaos
 * faults may restart or break. The staging systems (the systems of record) keep their data on
 * the shared server: they are outside the product, and a fault of the ledger must not rewrite
 * the evidence the checks read back.
 */
export interface ChaosStack {
  pg: PrivatePostgres;
  redis: PrivateRedis;
  /** Name of the ledger database on the private cluster. */
  dbName: string;
  /** The ledger, for the checks (its pool survives server restarts). */
  db: Db;
  /** The staging systems' database on the shared server. */
  staging: TestDatabase;
  prefix: string;
  env: Record<string, string>;
  /** Folder holding the services' logs. */
  dir: string;
  url: (service: string) => string;
  /** The current process of each service (a restart replaces it). */
  processes: () => Map<string, ChildProcess>;
  /** Services whose process has ended (killed or crashed) and not been started again. */
  dead: () => string[];
  /** Unexpected process ends since start (the harness's own kills are not counted). */
  crashes: Crash[];
  /**
   * `kill -9` of a service by the harness (not counted as a crash); resolves when it has exited.
   * With `keepDown` (the default) it stays down until {@link ChaosStack.restart}; without, the
   * stack's supervisor restarts it as after any crash.
   */
  kill: (service: string, opts?: { keepDown?: boolean }) => Promise<void>;
  /** How many times the supervisor restarted `service`. */
  restarts: (service: string) => number;
  /**
   * Resolves when the supervisor has restarted `service` more than `before` times (read before the
   * kill: the count moves as the process exits) and the new process is ready. @throws Error after 120 s.
   */
  supervised: (service: string, before: number) => Promise<void>;
  /** Starts a service again and waits until it is ready. */
  restart: (service: string) => Promise<void>;
  close: () => Promise<void>;
}

const SHARED_ENV = {
  LOG_LEVEL: 'warn',
  GATEHOUSE_ENV: 'test',
  AUDIT_ANCHOR_INTERVAL_MS: '500',
  // No background reconciliation pass: the checks run their own after each fault.
  RECONCILE_INTERVAL_MS: '0',
  // The executor holds consequential steps soon after audit stops, so the audit fault bites.
  AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500',
  AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3000',
};

/** Watches every process the stacks start and records the ends the harness did not ask for. */
function watchCrashes(stacks: RunningStack[], crashes: Crash[], expected: WeakSet<ChildProcess>): () => void {
  const seen = new WeakSet<ChildProcess>();
  const timer = setInterval(() => {
    for (const s of stacks)
      for (const [service, child] of s.processes) {
        if (seen.has(child)) continue;
        seen.add(child);
        child.once('exit', (code, signal) => {
          if (!expected.has(child)) crashes.push({ service, code, signal, atMs: Date.now() });
        });
      }
  }, 100);
  return () => clearInterval(timer);
}

/**
 * Starts a private Postgres cluster (ledger database migrated), a private Redis and every
 * service as its own process on free ports; `extra` overrides the environment.
 * @throws Error when a server or a service does not start (everything started is stopped).
 */
export async function startChaosStack(extra: Record<string, string> = {}): Promise<ChaosStack> {
  const pgServer = await startPrivatePostgres();
  const redis = await startPrivateRedis();
  const ledger = await createTestDatabase({ server: pgServer.url });
  const dbUrl = ledger.url;
  const dbName = ledger.name;
  const staging = await createTestDatabase({ migrate: false });
  const prefix = 'ghchaos';
  const env: Record<string, string> = {
    ...SHARED_ENV,
    DATABASE_URL: dbUrl,
    REDIS_URL: redis.url,
    QUEUE_PREFIX: prefix,
    AUDIT_SIGNING_KEY_PATH: resolve(mkdtempSync(resolve(tmpdir(), 'gh-audit-')), 'key.pem'),
  };
  for (const svc of SERVICES) env[svc.portVar] = String(await freePort());
  env.STAGING_URL = `http://127.0.0.1:${env.STAGING_PORT}`;
  env.MODEL_BASE_URL = `http://127.0.0.1:${env.MODEL_STUB_PORT}/v1`;
  Object.assign(env, extra);
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-chaos-'));
  const stacks: RunningStack[] = [];
  const ownerOf = new Map<string, RunningStack>();
  const crashes: Crash[] = [];
  const expected = new WeakSet<ChildProcess>();
  const stopWatching = watchCrashes(stacks, crashes, expected);
  const stopAll = async (): Promise<void> => {
    stopWatching();
    for (const s of stacks) for (const child of s.processes.values()) expected.add(child);
    await Promise.all(stacks.map((s) => s.stop(5000)));
    await redis.stop();
    await ledger.drop().catch(() => undefined);
    await pgServer.destroy();
    await staging.drop();
  };
  try {
    const others = SERVICES.map((s) => s.name).filter((n) => n !== 'staging');
    const readyTimeoutMs = 150_000;
    // Staging keeps its records apart but reads the revocation epoch from the ledger's database
    // (it fails closed without one: docs/decisions/0170-delegated-credentials-bind-the-operation.md).
    stacks.push(
      await startStack({
        env: { ...env, DATABASE_URL: staging.url, GATEHOUSE_EPOCH_DATABASE_URL: dbUrl },
        dir,
        readyTimeoutMs,
        only: ['staging'],
      }),
    );
    stacks.push(await startStack({ env, dir, readyTimeoutMs, only: others }));
  } catch (err) {
    await stopAll();
    throw err;
  }
  for (const s of stacks) for (const name of s.processes.keys()) ownerOf.set(name, s);
  const db = ledger.db;
  const processes = (): Map<string, ChildProcess> => new Map(stacks.flatMap((s) => [...s.processes]));
  const ended = (c: ChildProcess): boolean => c.exitCode !== null || c.signalCode !== null;
  return {
    pg: pgServer,
    redis,
    dbName,
    db,
    staging,
    prefix,
    env,
    dir,
    url: (service) => `http://127.0.0.1:${env[SERVICES.find((s) => s.name === service)!.portVar]}`,
    processes,
    dead: () => [...processes()].filter(([, c]) => ended(c)).map(([n]) => n),
    crashes,
    kill: async (service, opts = {}) => {
      const child = processes().get(service);
      if (!child || ended(child)) return;
      expected.add(child);
      await ownerOf.get(service)!.kill(service, 'SIGKILL', { keepDown: opts.keepDown ?? true });
    },
    restart: async (service) => {
      const old = processes().get(service);
      if (old) expected.add(old);
      await ownerOf.get(service)!.restart(service);
    },
    restarts: (service) => ownerOf.get(service)!.restarts(service),
    supervised: async (service, before) => {
      const owner = ownerOf.get(service)!;
      const until = Date.now() + 120_000;
      while (owner.restarts(service) === before) {
        if (Date.now() > until) throw new Error(`the supervisor did not restart ${service}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await owner.ready(service);
    },
    close: async () => {
      await stopAll();
    },
  };
}
