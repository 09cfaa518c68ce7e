import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { formatStackStatus, startStack, statusRecorder, type RunningStack, type ServiceStatus, type StackEvent } from '@gatehouse/cli';
import {
  createTestDatabase,
  freePort,
  startPrivatePostgres,
  startPrivateRedis,
  testQueuePrefix,
  type PrivatePostgres,
  type PrivateRedis,
  type TestDatabase,
} from '@gatehouse/test-harness';

// The supervisor's liveness rule (ADR 0739) over a real audit service on a private Postgres and
// Redis: a process the supervisor restarted that keeps answering — /readyz 503 naming what it
// waits for, or, before it listens, the supervisor's ping — is left running however long the wait,
// and reported as waiting; one that answers nothing for the liveness window is killed and
// restarted; a wait only an operator ends is reported once, not crash-looped. The ready timeout
// is cut to 20 s and every wait below lasts longer: the old rule killed each of these processes.

const READY_TIMEOUT_MS = 20_000;
const WINDOW_MS = 8_000;
/** Longer than the ready timeout plus a liveness window: the old rule had killed the process by then. */
const OUTAGE_MS = READY_TIMEOUT_MS + WINDOW_MS + 2_000;

let pg: PrivatePostgres;
let redis: PrivateRedis;
let t: TestDatabase;
let dir: string;
let stack: RunningStack;
let port: number;
const events: StackEvent[] = [];

beforeAll(async () => {
  [pg, redis] = await Promise.all([startPrivatePostgres(), startPrivateRedis()]);
  t = await createTestDatabase({ server: pg.url });
  dir = mkdtempSync(resolve(tmpdir(), 'gh-liveness-'));
  port = await freePort();
  const record = statusRecorder(dir, { audit: port });
  stack = await startStack({
    env: {
      DATABASE_URL: t.url,
      REDIS_URL: redis.url,
      QUEUE_PREFIX: testQueuePrefix(),
      AUDIT_PORT: String(port),
      AUDIT_SIGNING_KEY_PATH: resolve(dir, 'audit-key.pem'),
      AUDIT_ANCHOR_INTERVAL_MS: '500',
      LOG_LEVEL: 'warn',
      GATEHOUSE_ENV: 'test',
    },
    dir,
    only: ['audit'],
    readyTimeoutMs: READY_TIMEOUT_MS,
    // Two minutes to a first answer: loading its code on a busy machine is no hang.
    liveness: { startupMs: 120_000, windowMs: WINDOW_MS, periodMs: 500 },
    restartPolicy: { initialMs: 100, maxMs: 400, crashLoopAfter: 10 },
    onEvent: (e) => {
      events.push(e);
      record(e);
    },
  });
}, 180_000);

afterAll(async () => {
  await stack?.stop(2000);
  await t?.db.destroy().catch(() => undefined);
  await Promise.all([pg?.destroy(), redis?.stop()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The audit service as `status.json` records it, and its `stack status` line. */
function status(): { audit: ServiceStatus; line: string } {
  const services = JSON.parse(readFileSync(resolve(dir, 'status.json'), 'utf8')) as Record<string, ServiceStatus>;
  return { audit: services.audit!, line: formatStackStatus({ dir, supervisorPid: 1, unsupervised: [], services })[1]! };
}

const supervisorLog = (): string => readFileSync(resolve(dir, 'supervisor.log'), 'utf8');
const since = (from: number): StackEvent[] => events.slice(from);

/** SIGKILLs the audit process; resolves once the supervisor started another, with the restart count after it. */
async function crash(): Promise<number> {
  const before = stack.restarts('audit');
  const old = stack.processes.get('audit');
  await stack.kill('audit', 'SIGKILL');
  await vi.waitFor(() => expect(stack.processes.get('audit')).not.toBe(old), { timeout: 10_000 });
  expect(stack.restarts('audit')).toBe(before + 1);
  return before + 1;
}

describe('the supervisor leaves a waiting process alone and kills a hung one (ADR 0739)', () => {
  it(
    'Redis down longer than the ready timeout: the restarted process answers 503 naming redis, is reported waiting, not killed, and is ready once Redis is back',
    { timeout: 120_000 },
    async () => {
      const from = events.length;
      await redis.kill();
      let restarts = 0;
      try {
        restarts = await crash();
        const pid = stack.processes.get('audit')!.pid;
        await vi.waitFor(() => expect(since(from).find((e) => e.type === 'not-ready' && 'redis' in e.failing)).toBeDefined(), {
          timeout: 60_000,
          interval: 250,
        });
        expect(status().audit).toMatchObject({ state: 'not-ready', failing: { redis: expect.any(String) } });
        expect(status().line).toMatch(/audit\s+not-ready\s+restarts 1.*waiting for redis \(/);
        await sleep(OUTAGE_MS);
        expect(stack.restarts('audit')).toBe(restarts);
        expect(stack.processes.get('audit')!.pid).toBe(pid);
        expect(supervisorLog()).toMatch(/audit is alive and waits \(redis: /);
        expect(supervisorLog()).not.toContain('killing it');
      } finally {
        await redis.restartEmpty();
      }
      await stack.ready('audit', 60_000);
      await vi.waitFor(() => expect(status().audit.state).toBe('ready'), { timeout: 10_000 });
      expect(stack.restarts('audit')).toBe(restarts);
    },
  );

  it(
    'Postgres down longer than the ready timeout: the restarted process waits at its boot step without listening, answers the ping, is reported waiting for postgres, and is ready once Postgres is back',
    { timeout: 150_000 },
    async () => {
      const from = events.length;
      await pg.stop();
      let restarts = 0;
      try {
        restarts = await crash();
        const pid = stack.processes.get('audit')!.pid;
        await vi.waitFor(() => expect(since(from).find((e) => e.type === 'not-ready' && 'postgres' in e.failing)).toBeDefined(), {
          timeout: 60_000,
          interval: 250,
        });
        expect(status().audit.failing?.postgres).toMatch(/not listening yet: its boot step "check the database schema" waits for postgres/);
        expect(status().line).toMatch(/audit\s+not-ready\s+restarts \d+.*waiting for postgres \(not listening yet/);
        await sleep(OUTAGE_MS);
        expect(stack.restarts('audit')).toBe(restarts);
        expect(stack.processes.get('audit')!.pid).toBe(pid);
      } finally {
        await pg.start();
      }
      await stack.ready('audit', 60_000);
      expect(stack.restarts('audit')).toBe(restarts);
    },
  );

  it(
    'a restarted process that stops answering (SIGSTOP) for the liveness window is killed and restarted, then ready',
    { timeout: 120_000 },
    async () => {
      const from = events.length;
      await redis.kill();
      let restarts = 0;
      try {
        restarts = await crash();
        const hung = stack.processes.get('audit')!;
        await vi.waitFor(() => expect(since(from).find((e) => e.type === 'not-ready')).toBeDefined(), { timeout: 60_000, interval: 250 });
        const stoppedAt = Date.now();
        process.kill(hung.pid!, 'SIGSTOP');
        await vi.waitFor(() => expect(stack.restarts('audit')).toBe(restarts + 1), { timeout: WINDOW_MS + 20_000, interval: 250 });
        expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(WINDOW_MS);
        expect(hung.signalCode).toBe('SIGKILL');
        expect(supervisorLog()).toMatch(/audit did not answer for \d+ ms \(hung\); killing it/);
        expect(since(from)).toContainEqual(expect.objectContaining({ type: 'exited', service: 'audit', signal: 'SIGKILL' }));
      } finally {
        await redis.restartEmpty();
      }
      await stack.ready('audit', 60_000);
      expect(stack.restarts('audit')).toBe(restarts + 1);
    },
  );

  it(
    'a restart that meets a check only an operator clears is reported once as needing an operator and left running, not crash-looped',
    { timeout: 120_000 },
    async () => {
      const from = events.length;
      // Another key's anchor, newest: only a recorded rotation or a fresh database clears that (ADR 0717).
      const foreign = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
      await t.db
        .insertInto('audit_anchors')
        .values({ seq: '1000000', hash: '0'.repeat(64), signature: 'foreign', public_key: foreign })
        .execute();
      const restarts = await crash();
      const pid = stack.processes.get('audit')!.pid;
      await vi.waitFor(() => expect(since(from).find((e) => e.type === 'needs-operator')).toBeDefined(), {
        timeout: 60_000,
        interval: 250,
      });
      expect(status().audit).toMatchObject({ state: 'needs-operator', failing: { anchorKey: expect.stringContaining('rotate-key') } });
      expect(status().line).toMatch(/audit\s+needs-operator\s+restarts \d+.*needs an operator for anchorKey \(/);
      await sleep(READY_TIMEOUT_MS);
      expect(stack.restarts('audit')).toBe(restarts);
      expect(stack.processes.get('audit')!.pid).toBe(pid);
      expect(since(from).filter((e) => e.type === 'needs-operator')).toHaveLength(1);
      expect(since(from).filter((e) => e.type === 'crash-loop')).toEqual([]);
      expect(supervisorLog().match(/audit needs an operator: its \/readyz fails anchorKey/g)).toHaveLength(1);
      // It keeps answering /readyz with the fix (alive): once the operator acts it becomes ready in place (ADR 0729).
      const answer = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(5000) });
      expect(answer.status).toBe(503);
      expect(await answer.json()).toMatchObject({ needsOperator: ['anchorKey'] });
    },
  );
});
