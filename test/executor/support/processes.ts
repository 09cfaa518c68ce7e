import { spawn, type ChildProcess } from 'node:child_process';
import { SERVICE_V8_FLAGS } from '@gatehouse/cli';
import { repoRoot } from '@gatehouse/contracts';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';

/** An executor started as its own Node process (services/executor/src/main.ts). */
export interface ExecutorProcess {
  child: ChildProcess;
  /** Resolves once the process logged "executor ready" (worker and HTTP up). */
  ready: Promise<void>;
  /** Resolves with the exit code or signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything it wrote (JSON log lines). */
  output: () => string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop: (graceMs?: number) => Promise<void>;
}

/**
 * Environment of an executor over the test's database, queue prefix and staging URL, minting
 * with the harness's delegation key (`signingKeyPath`, the staging app verifies with its JWKS).
 */
export function executorEnv(
  opts: { databaseUrl: string; prefix: string; stagingUrl: string; signingKeyPath: string },
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    DATABASE_URL: opts.databaseUrl,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: opts.prefix,
    STAGING_URL: opts.stagingUrl,
    GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: opts.signingKeyPath,
    GATEHOUSE_ENV: 'test',
    GATEHOUSE_RELEASE: 'rel-1',
    EXECUTOR_PORT: '0',
    EXECUTOR_CONCURRENCY: '4',
    EXECUTOR_STALLED_INTERVAL_MS: '1000',
    LOG_LEVEL: 'info',
    // No audit service runs beside these executors: the harness wrote one heartbeat; a wide gate.
    AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '3600000',
    AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3600000',
    ...extra,
  };
}

/**
 * Spawns an executor process with exactly `env` (plus nothing from the parent but PATH/HOME) and
 * the heap settings every deployment gives it (`SERVICE_V8_FLAGS`, ADR 0360), so a crash or
 * shutdown test runs the process as it runs in production.
 */
export function startExecutor(env: Record<string, string>): ExecutorProcess {
  const child = spawn(process.execPath, [...SERVICE_V8_FLAGS, 'services/executor/src/main.ts'], {
    cwd: repoRoot,
    // It ends with this test worker, even one killed mid-test (installShutdown's parent watch).
    env: { GATEHOUSE_EXIT_WITH_PARENT: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let markReady: () => void = () => {};
  let failReady: (e: Error) => void = () => {};
  const ready = new Promise<void>((ok, ko) => {
    markReady = ok;
    failReady = ko;
  });
  const onData = (chunk: Buffer): void => {
    out += chunk.toString();
    if (out.includes('"msg":"executor ready"')) markReady();
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => {
    child.once('exit', (code, signal) => {
      failReady(new Error(`executor exited (${code ?? signal}) before it was ready:\n${out.slice(-2000)}`));
      done({ code, signal });
    });
  });
  ready.catch(() => {});
  return {
    child,
    ready,
    exited,
    output: () => out,
    stop: async (graceMs = 5000) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(timer);
    },
  };
}
