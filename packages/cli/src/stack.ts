import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';

/** A service process of the stack, its entry file and the env var that sets its port. */
export interface ServiceSpec {
  name: string;
  entry: string;
  portVar: string;
  defaultPort: number;
}

/** Every process of the local stack (docs/product/public-contract.md default ports; worker-only services get health ports). */
export const SERVICES: readonly ServiceSpec[] = [
  { name: 'staging', entry: 'services/staging/src/main.ts', portVar: 'STAGING_PORT', defaultPort: 7104 },
  { name: 'model-stub', entry: 'services/model-stub/src/main.ts', portVar: 'MODEL_STUB_PORT', defaultPort: 7103 },
  { name: 'audit', entry: 'services/audit/src/main.ts', portVar: 'AUDIT_PORT', defaultPort: 7113 },
  { name: 'policy-gateway', entry: 'services/policy-gateway/src/main.ts', portVar: 'POLICY_GATEWAY_PORT', defaultPort: 7111 },
  { name: 'approval', entry: 'services/approval/src/main.ts', portVar: 'APPROVAL_PORT', defaultPort: 7102 },
  { name: 'executor', entry: 'services/executor/src/main.ts', portVar: 'EXECUTOR_PORT', defaultPort: 7112 },
  { name: 'agent-loop', entry: 'services/agent-loop/src/main.ts', portVar: 'AGENT_LOOP_PORT', defaultPort: 7101 },
  { name: 'ops', entry: 'services/ops/src/main.ts', portVar: 'OPS_PORT', defaultPort: 7105 },
];

/**
 * Preloaded into every service process: enables the http/express/pg/ioredis
 * auto-instrumentations before the service's modules load (packages/telemetry/src/register.ts).
 */
const TELEMETRY_PRELOAD = resolve(repoRoot, 'packages/telemetry/src/register.ts');

/** Where a stack keeps logs and pid files. */
export function stateDir(name = 'stack'): string {
  return resolve(repoRoot, '.gatehouse', name);
}

/** Port of a service under `env` (its port variable, else the default). */
export function portOf(spec: ServiceSpec, env: Record<string, string | undefined>): number {
  return Number(env[spec.portVar] ?? spec.defaultPort);
}

/** A running stack: its processes and their ports. */
export interface RunningStack {
  processes: Map<string, ChildProcess>;
  ports: Record<string, number>;
  /** SIGTERM to every process, waiting up to `graceMs` (default 10 000 ms) before SIGKILL. */
  stop: (graceMs?: number) => Promise<void>;
  /**
   * Starts one service again (after it died or was killed), with `env` overrides replacing the
   * stack's (e.g. to drop a test hook), and waits until it is ready.
   */
  restart: (name: string, env?: Record<string, string | undefined>) => Promise<void>;
}

async function answers(port: number): Promise<string | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(500) });
    const body = (await res.json().catch(() => ({}))) as { service?: string };
    return body.service ?? 'something';
  } catch {
    return null;
  }
}

async function waitReady(port: number, deadlineMs: number, child: ChildProcess, name: string): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with code ${child.exitCode} before it was ready (see its log)`);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) });
      const body = (await res.json().catch(() => ({}))) as { service?: string };
      if (res.ok && body.service === name) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadlineMs) throw new Error(`${name} not ready on port ${port} in time`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/**
 * Starts every service as a separate Node process with `env` (and the telemetry preload), logs
 * to `<dir>/<service>.log`,
 * and waits until each answers `GET /readyz` (timeout `readyTimeoutMs` per service, default 120 000 ms).
 * `detached` processes outlive this one (for `gatehouse stack up`); pids go to `<dir>` either
 * way. A foreground stack's processes are stopped when this process exits, or on SIGINT/SIGTERM
 * with `stopOnSignals`. Refuses to start when a port already answers (a leftover stack).
 * @throws Error naming the service that exited or did not become ready (all are stopped first).
 */
export async function startStack(opts: {
  env: Record<string, string | undefined>;
  dir: string;
  detached?: boolean;
  readyTimeoutMs?: number;
  only?: string[];
  stopOnSignals?: boolean;
}): Promise<RunningStack> {
  mkdirSync(opts.dir, { recursive: true });
  const processes = new Map<string, ChildProcess>();
  const ports: Record<string, number> = {};
  const stop = async (graceMs = 10_000): Promise<void> => {
    const exits = [...processes.entries()].map(
      ([, child]) =>
        new Promise<void>((done) => {
          if (child.exitCode !== null || child.signalCode !== null) return done();
          const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
          child.once('exit', () => {
            clearTimeout(timer);
            done();
          });
          child.kill('SIGTERM');
        }),
    );
    await Promise.all(exits);
  };
  const selected = SERVICES.filter((s) => !opts.only || opts.only.includes(s.name));
  // Refuse to start over a port something else holds (a leftover stack would answer for us).
  for (const spec of selected) {
    const holder = await answers(portOf(spec, opts.env));
    if (holder)
      throw new Error(
        holder === 'something'
          ? `port ${portOf(spec, opts.env)} for ${spec.name} is held by another program; stop it, or give ${spec.name} another port (${spec.portVar}=<port>)`
          : `port ${portOf(spec, opts.env)} for ${spec.name} is already in use by a Gatehouse ${holder}; stop the other stack first: ./run stack down`,
      );
  }
  if (!opts.detached) {
    // Children of a foreground stack die with it, whatever ends this process.
    const killAll = (): void => {
      for (const child of processes.values()) if (child.exitCode === null) child.kill('SIGTERM');
    };
    process.once('exit', killAll);
    if (opts.stopOnSignals) {
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
        process.once(sig, () => {
          void stop(5000).finally(() => process.exit(130));
        });
      }
    }
  }
  const launch = async (spec: ServiceSpec, env: Record<string, string | undefined>, deadlineMs: number): Promise<void> => {
    const port = portOf(spec, opts.env);
    ports[spec.name] = port;
    const log = openSync(resolve(opts.dir, `${spec.name}.log`), 'a');
    const child = spawn(process.execPath, ['--import', TELEMETRY_PRELOAD, resolve(repoRoot, spec.entry)], {
      cwd: repoRoot,
      env: { ...process.env, ...env, [spec.portVar]: String(port) },
      stdio: ['ignore', log, log],
      detached: opts.detached ?? false,
    });
    closeSync(log);
    processes.set(spec.name, child);
    writeFileSync(resolve(opts.dir, `${spec.name}.pid`), String(child.pid));
    if (opts.detached) child.unref();
    await waitReady(port, deadlineMs, child, spec.name);
  };
  const restart = async (name: string, env: Record<string, string | undefined> = {}): Promise<void> => {
    const spec = SERVICES.find((s) => s.name === name);
    if (!spec) throw new Error(`no service ${name}`);
    const old = processes.get(name);
    if (old && old.exitCode === null && old.signalCode === null) {
      const gone = new Promise((r) => old.once('exit', r));
      old.kill('SIGKILL');
      await gone;
    }
    await launch(spec, { ...opts.env, ...env }, Date.now() + (opts.readyTimeoutMs ?? 120_000));
  };
  try {
    // In order (the systems of record before the services that read them at start-up), each with
    // its own deadline: on a loaded machine one slow start must not eat the others' time.
    for (const spec of selected) await launch(spec, opts.env, Date.now() + (opts.readyTimeoutMs ?? 120_000));
  } catch (err) {
    await stop(2000);
    throw err;
  }
  return { processes, ports, stop, restart };
}

/** Stops a detached stack by its pid files (SIGTERM, then SIGKILL after `graceMs`). */
export async function stopDetachedStack(dir: string, graceMs = 10_000): Promise<string[]> {
  const stopped: string[] = [];
  for (const spec of [...SERVICES].reverse()) {
    const file = resolve(dir, `${spec.name}.pid`);
    if (!existsSync(file)) continue;
    const pid = Number(readFileSync(file, 'utf8'));
    rmSync(file);
    if (!alive(pid)) continue;
    process.kill(pid, 'SIGTERM');
    const until = Date.now() + graceMs;
    while (alive(pid) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    if (alive(pid)) process.kill(pid, 'SIGKILL');
    stopped.push(spec.name);
  }
  return stopped;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
