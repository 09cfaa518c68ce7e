import { resolve } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { SERVICES, startStack, type DemoTarget, type RunningStack, type StackOptions } from '@gatehouse/cli';
import { createTestDatabase, dropQueuePrefix, freePort, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from './infrastructure.ts';

/** A whole Gatehouse stack as real processes over a test database and queue prefix. */
export interface E2EStack {
  db: TestDatabase;
  prefix: string;
  stack: RunningStack;
  url: (service: string) => string;
  env: Record<string, string>;
  /** Folder holding the services' logs. */
  dir: string;
  close: () => Promise<void>;
}

/**
 * Starts every service as its own process on free ports with its own database and prefix;
 * `extra` overrides the environment (e.g. short leases for crash tests). The stack supervises
 * its services (a process that exits is restarted, see docs/decisions/0121-local-stack-supervision.md)
 * unless `opts.supervise` is false; a test that kills a service to observe the system without it
 * uses `stack.kill(name, 'SIGKILL', { keepDown: true })`. `opts.pgServer`
 * (`postgres://user@host:port`) puts the database on another cluster than the shared one, e.g.
 * a private one the test restarts.
 */
export async function startE2EStack(
  extra: Record<string, string> = {},
  opts: Pick<StackOptions, 'supervise' | 'restartPolicy' | 'onEvent'> & { pgServer?: string } = {},
): Promise<E2EStack> {
  const { pgServer, ...stackOpts } = opts;
  const db = await createTestDatabase({ server: pgServer });
  const prefix = testQueuePrefix();
  const env: Record<string, string> = {
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    LOG_LEVEL: 'warn',
    GATEHOUSE_ENV: 'test',
    AUDIT_ANCHOR_INTERVAL_MS: '500',
    AUDIT_SIGNING_KEY_PATH: resolve(mkdtempSync(resolve(tmpdir(), 'gh-audit-')), 'key.pem'),
    // One delegation key pair for every process of this stack, and any stack started beside it
    // with the same env (startStack creates it; the executor gets the key, staging the JWKS).
    ...delegationKeyEnv(mkdtempSync(resolve(tmpdir(), 'gh-delegation-'))),
    // No background reconciliation pass unless a test asks for one: it would settle parked steps mid-test.
    RECONCILE_INTERVAL_MS: '0',
    // The services end with this test worker even when it is killed (a hook's timeout): no stack outlives its test.
    GATEHOUSE_EXIT_WITH_PARENT: '1',
  };
  for (const svc of SERVICES) env[svc.portVar] = String(await freePort());
  env.STAGING_URL = `http://127.0.0.1:${env.STAGING_PORT}`;
  env.MODEL_BASE_URL = `http://127.0.0.1:${env.MODEL_STUB_PORT}/v1`;
  Object.assign(env, extra);
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-e2e-'));
  // Generous: on a loaded 2-core machine seven processes with the telemetry preload start slowly.
  const stack = await startStack({ env, dir, readyTimeoutMs: 150_000, ...stackOpts });
  const e2e: E2EStack = {
    db,
    prefix,
    stack,
    // A test may replace `stack` (a full restart): both read the current one.
    url: (service: string): string => `http://127.0.0.1:${e2e.stack.ports[service]}`,
    env,
    dir,
    close: async () => {
      await e2e.stack.stop();
      await dropQueuePrefix(TEST_REDIS_URL, prefix);
      await db.drop();
    },
  };
  return e2e;
}

/** `GATEHOUSE_DELEGATION_SIGNING_KEY_PATH` and `GATEHOUSE_DELEGATION_JWKS_PATH` in `dir`. */
export function delegationKeyEnv(dir: string): Record<string, string> {
  return {
    GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: resolve(dir, 'delegation-ed25519.pem'),
    GATEHOUSE_DELEGATION_JWKS_PATH: resolve(dir, 'delegation-jwks.json'),
  };
}

/** Where `runDemo` finds a test stack (its URLs, database, queue prefix and local secrets). */
export function demoTarget(s: E2EStack): DemoTarget {
  return {
    intakeUrl: s.url('agent-loop'),
    approvalUrl: s.url('approval'),
    stagingUrl: s.url('staging'),
    databaseUrl: s.db.url,
    redisUrl: s.env.REDIS_URL!,
    queuePrefix: s.prefix,
    release: 'rel-1',
    authSecret: 'local-auth-secret-change-me',
    auditKeyPath: s.env.AUDIT_SIGNING_KEY_PATH,
  };
}
