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

/** Every process of the local stack (SPEC §9 default ports; worker-only services get health ports). */
export const SERVICES: readonly ServiceSpec[] = [
  { name: 'staging', entry: 'services/staging/src/main.ts', portVar: 'STAGING_PORT', defaultPort: 7104 },
  { name: 'model-stub', entry: 'services/model-stub/src/main.ts', portVar: 'MODEL_STUB_PORT', defaultPort: 7103 },
  { name: 'audit', entry: 'services/audit/src/main.ts', portVar: 'AUDIT_PORT', defaultPort: 7113 },
  { name: 'policy-gateway', entry: 'services/policy-gateway/src/main.ts', portVar: 'POLICY_GATEWAY_PORT', defaultPort: 7111 },
  { name: 'approval', entry: 'services/approval/src/main.ts', portVar: 'APPROVAL_PORT', defaultPort: 7102 },
  { name: 'executor', entry: 'services/executor/src/main.ts', portVar: 'EXECUTOR_PORT', defaultPort: 7112 },
  { name: 'agent-loop', entry: 'services/agent-loop/src/main.ts', portVar: 'AGENT_LOOP_PORT', defaultPort: 7101 },
];

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
}

async function waitReady(url: string, deadlineMs: number, child: ChildProcess, name: string): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with code ${child.exitCode} before it was ready`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadlineMs) throw new Error(`${name} not ready at ${url} in time`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/**
 * Starts every service as a separate Node process with `env`, logs to `<dir>/<service>.log`,
 * and waits until each answers `GET /readyz` (timeout `readyTimeoutMs`, default 60 000 ms).
 * `detached` processes outlive this one (for `gatehouse stack up`); their pids go to `<dir>`.
 * @throws Error naming the service that exited or did not become ready (all are stopped first).
 */
export async function startStack(opts: { env: Record<string, string | undefined>; dir: string; detached?: boolean; readyTimeoutMs?: number; only?: string[] }): Promise<RunningStack> {
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
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  try {
    for (const spec of SERVICES.filter((s) => !opts.only || opts.only.includes(s.name))) {
      const port = portOf(spec, opts.env);
      ports[spec.name] = port;
      const log = openSync(resolve(opts.dir, `${spec.name}.log`), 'a');
      const child = spawn(process.execPath, [resolve(repoRoot, spec.entry)], {
        cwd: repoRoot,
        env: { ...process.env, ...opts.env, [spec.portVar]: String(port) },
        stdio: ['ignore', log, log],
        detached: opts.detached ?? false,
      });
      closeSync(log);
      processes.set(spec.name, child);
      if (opts.detached) {
        writeFileSync(resolve(opts.dir, `${spec.name}.pid`), String(child.pid));
        child.unref();
      }
      await waitReady(`http://127.0.0.1:${port}/readyz`, deadline, child, spec.name);
    }
  } catch (err) {
    await stop(2000);
    throw err;
  }
  return { processes, ports, stop };
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
