import { execFileSync, spawn } from 'node:child_process';
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';
import { probeReady, SERVICES, type StackEvent } from './stack.ts';

/** What the stack supervisor process tells the CLI that started it (over the IPC channel). */
export type DaemonMessage =
  { type: 'event'; event: StackEvent } | { type: 'up'; ports: Record<string, number> } | { type: 'failed'; message: string };

const DAEMON = resolve(repoRoot, 'apps/cli/src/stack-daemon.ts');
/** How often a waiting start prints who it is still waiting for, ms. */
const PROGRESS_EVERY_MS = 5000;

/**
 * Prints start-up progress of a stack through `out`: each service when it is ready, each exit,
 * a service's failing `/readyz` checks with their reasons as soon as they change (and whether
 * only an operator clears them, ADR 0729), and every 5 s the services still awaited, with the
 * checks they fail. Call `done()` when the wait is over.
 */
export function progressPrinter(services: string[], out: (line: string) => void): { onEvent: (e: StackEvent) => void; done: () => void } {
  const waiting = new Set(services);
  const failing = new Map<string, string[]>();
  const since = Date.now();
  const ticker = setInterval(() => {
    const awaited = [...waiting].map((s) => (failing.get(s)?.length ? `${s} (not ready: ${failing.get(s)!.join(', ')})` : s));
    if (waiting.size) out(`  … waiting for ${awaited.join(', ')} (${Math.round((Date.now() - since) / 1000)} s)`);
  }, PROGRESS_EVERY_MS);
  const onEvent = (e: StackEvent): void => {
    if (e.type === 'not-ready') {
      failing.set(e.service, Object.keys(e.failing));
      for (const [check, why] of Object.entries(e.failing))
        out(`  not ready  ${e.service}: ${check}${e.needsOperator.includes(check) ? ' (will not clear by itself)' : ''} — ${why}`);
    }
    if (e.type === 'ready') failing.delete(e.service);
    if (e.type === 'ready' && waiting.delete(e.service))
      out(`  ready  ${e.service} (${services.length - waiting.size}/${services.length})`);
    if (e.type === 'exited' && e.delayMs !== null)
      out(`  ${e.service} exited (${e.signal ?? `code ${e.code}`}); restart ${e.restarts} in ${e.delayMs} ms`);
    if (e.type === 'crash-loop') out(`  ${e.service} is crash-looping (${e.restarts} restarts); see its log`);
    if (e.type === 'needs-operator')
      out(`  ${e.service} needs an operator: ${e.needsOperator.map((c) => `${c} — ${e.failing[c]}`).join('; ')}`);
  };
  return { onEvent, done: () => clearInterval(ticker) };
}

/**
 * Starts the stack supervisor as a detached process (it outlives this one) over `dir`, printing
 * progress through `out`, and resolves with the services' ports once every one is ready. The
 * supervisor writes `<dir>/supervisor.pid` and logs to `<dir>/supervisor.log`. SIGINT/SIGTERM
 * while waiting stop the supervisor and its services.
 * @throws Error when a service cannot start (the supervisor has stopped them all and exited).
 */
export async function launchStackDaemon(opts: {
  env: Record<string, string | undefined>;
  dir: string;
  only?: string[];
  out: (line: string) => void;
}): Promise<Record<string, number>> {
  mkdirSync(opts.dir, { recursive: true });
  const log = openSync(resolve(opts.dir, 'supervisor.log'), 'a');
  const args = [DAEMON, '--dir', opts.dir, ...(opts.only ? ['--only', opts.only.join(',')] : [])];
  const child = spawn(process.execPath, args, { cwd: repoRoot, env: opts.env, detached: true, stdio: ['ignore', log, log, 'ipc'] });
  closeSync(log);
  const names = SERVICES.filter((s) => !opts.only || opts.only.includes(s.name)).map((s) => s.name);
  const progress = progressPrinter(names, opts.out);
  // Ctrl-C while waiting: the supervisor (in its own session, so it does not see it) stops the stack.
  const abort = (): void => void child.kill('SIGTERM');
  process.once('SIGINT', abort).once('SIGTERM', abort);
  try {
    return await new Promise<Record<string, number>>((done, fail) => {
      child.on('message', (m: DaemonMessage) => {
        if (m.type === 'event') progress.onEvent(m.event);
        else if (m.type === 'up') done(m.ports);
        else fail(new Error(m.message));
      });
      child.once('exit', (code, signal) =>
        fail(new Error(`the stack supervisor ended (${signal ?? `code ${code}`}) before the stack was up; see ${opts.dir}/supervisor.log`)),
      );
    });
  } finally {
    progress.done();
    process.off('SIGINT', abort).off('SIGTERM', abort);
    child.removeAllListeners();
    if (child.connected) child.disconnect();
    child.unref();
  }
}

/**
 * One service as the supervisor last saw it (`<dir>/status.json`). `not-answering` is never
 * recorded: `stack status` reports it for a service recorded `ready` whose `/readyz` does not
 * answer now (a stopped, hung or overloaded process the supervisor still sees alive). `not-ready`:
 * alive and waiting for what `failing` names (a dependency; left running, ADR 0739);
 * `needs-operator`: alive and waiting for a check only an operator clears (ADR 0729), which
 * `failing` names with the fix.
 */
export interface ServiceStatus {
  state: 'starting' | 'ready' | 'exited' | 'crash-looping' | 'not-answering' | 'not-ready' | 'needs-operator';
  restarts: number;
  /**
   * For `not-ready`, and for `starting` when its `/readyz` already answers 503: the checks failing
   * now, check → reason (e.g. `postgres`).
   */
  failing?: Record<string, string>;
  /** The port its `/readyz` answers on (as the supervisor started it). */
  port?: number;
  /** The last exit: `signal SIGKILL` or `code 1`, and when (ISO 8601). */
  lastExit?: string;
  lastExitAt?: string;
  /** The last error its log held at that exit ({@link lastErrorIn}), e.g. `Error: listen EADDRINUSE …`. */
  lastError?: string;
  /** When the supervisor last reported a crash loop (ISO 8601); kept after the service is up again. */
  crashLoopAt?: string;
}

/** How much of the end of a service's log {@link lastErrorIn} reads, bytes. */
const LOG_TAIL_BYTES = 64 * 1024;
/** Longest error {@link lastErrorIn} returns, characters (cut with an ellipsis). */
const LAST_ERROR_CHARS = 240;

/** The message of one log line when it reports an error: a JSON (pino) line at error or fatal level, or Node's own uncaught-error line. */
function errorOfLine(line: string): string | undefined {
  if (line.startsWith('{')) {
    try {
      const j = JSON.parse(line) as { level?: number; msg?: unknown; err?: unknown };
      if ((j.level ?? 0) < 50) return undefined;
      const err = typeof j.err === 'string' ? j.err : (j.err as { message?: unknown } | undefined)?.message;
      return [j.msg, err].filter((x) => typeof x === 'string' && x).join(': ') || undefined;
    } catch {
      return undefined;
    }
  }
  // What Node prints for an uncaught error: `Error: listen EADDRINUSE …`, `TypeError [ERR_…]: …`.
  return /^[A-Za-z]*Error( \[[A-Z_]+\])?: /.test(line) ? line : undefined;
}

/**
 * The last error a service's log (`file`) holds — why it exited, as `gatehouse stack status` shows
 * beside the exit code: the last line, in the final {@link LOG_TAIL_BYTES} of the file, that is a
 * JSON log line at error or fatal level (its `msg`, and `err`'s message) or an uncaught error
 * Node printed; cut to {@link LAST_ERROR_CHARS}. Undefined when there is none or the file cannot be read.
 */
export function lastErrorIn(file: string): string | undefined {
  let text: string;
  try {
    const fd = openSync(file, 'r');
    try {
      const size = fstatSync(fd).size;
      const length = Math.min(size, LOG_TAIL_BYTES);
      const buf = Buffer.alloc(length);
      readSync(fd, buf, 0, length, size - length);
      text = buf.toString('utf8');
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  const lines = text.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const found = errorOfLine(lines[i]!.trim());
    if (found) return found.length > LAST_ERROR_CHARS ? `${found.slice(0, LAST_ERROR_CHARS - 1)}…` : found;
  }
  return undefined;
}

/**
 * Keeps `<dir>/status.json` up to date from the supervisor's events (for `gatehouse stack status`),
 * with each service's port from `ports` (service name → port).
 */
export function statusRecorder(dir: string, ports: Record<string, number> = {}): (e: StackEvent) => void {
  const status: Record<string, ServiceStatus> = {};
  return (e) => {
    const prev = status[e.service] ?? { state: 'starting', restarts: 0 };
    const next: ServiceStatus = { ...prev, restarts: e.restarts, ...(ports[e.service] ? { port: ports[e.service] } : {}) };
    if (e.type === 'starting' || e.type === 'ready') {
      next.state = e.type;
      delete next.failing;
    }
    if (e.type === 'not-ready' || e.type === 'needs-operator')
      Object.assign(next, { state: e.needsOperator.length ? 'needs-operator' : 'not-ready', failing: e.failing });
    if (e.type === 'exited') {
      const lastError = lastErrorIn(resolve(dir, `${e.service}.log`));
      Object.assign(next, {
        state: 'exited',
        lastExit: e.signal ? `signal ${e.signal}` : `code ${e.code}`,
        lastExitAt: new Date().toISOString(),
      });
      if (lastError) next.lastError = lastError;
      else delete next.lastError;
    }
    if (e.type === 'crash-loop') Object.assign(next, { state: 'crash-looping', crashLoopAt: new Date().toISOString() });
    // A crash loop stays reported until the service has been ready again.
    if (prev.state === 'crash-looping' && e.type !== 'ready') next.state = 'crash-looping';
    status[e.service] = next;
    writeFileSync(resolve(dir, 'status.json'), JSON.stringify(status, null, 2));
  };
}

/** The stack kept in one state folder, as `gatehouse stack status --json` prints it. */
export interface StackStatusReport {
  dir: string;
  /** The supervisor's pid when it runs, else null. */
  supervisorPid: number | null;
  /** Services whose pid file names a live process although no supervisor runs. */
  unsupervised: string[];
  /** Each service as the supervisor last saw it (empty without a supervisor). */
  services: Record<string, ServiceStatus>;
}

/** Reads the stack kept in `dir`: its supervisor, unsupervised leftovers and `<dir>/status.json`. */
export function readStackStatus(dir: string): StackStatusReport {
  const supervisor = stackPid(dir, 'supervisor');
  if (supervisor === undefined) {
    const unsupervised = SERVICES.map((s) => s.name).filter((name) => stackPid(dir, name) !== undefined);
    return { dir, supervisorPid: null, unsupervised, services: {} };
  }
  const file = resolve(dir, 'status.json');
  const services = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, ServiceStatus>) : {};
  return { dir, supervisorPid: supervisor, unsupervised: [], services };
}

/**
 * {@link readStackStatus}, with each service recorded `ready` probed now ({@link probeReady}):
 * one whose `/readyz` does not answer within `READY_PROBE_TIMEOUT_MS` (3 s; e.g. a SIGSTOPped
 * process) is reported `not-answering`; one that answers 503 is `not-ready`, with the checks it
 * names as failing (a dependency is down or hangs: the process is alive and waits for it, do not
 * restart it). A `starting` one that already answers 503 stays `starting`, with what it waits for
 * (a process restarted during an outage, or an audit replica refusing to anchor, ADR 0730). The
 * probes run in parallel.
 */
export async function probeStackStatus(dir: string): Promise<StackStatusReport> {
  const r = readStackStatus(dir);
  await Promise.all(
    Object.entries(r.services).map(async ([name, s]) => {
      if ((s.state !== 'ready' && s.state !== 'starting') || !s.port) return;
      const probe = await probeReady(s.port, name);
      if (s.state === 'starting') {
        if (probe.state === 'not-ready') s.failing = probe.failing;
        return;
      }
      if (probe.state === 'no-answer') s.state = 'not-answering';
      if (probe.state === 'not-ready') Object.assign(s, { state: 'not-ready', failing: probe.failing });
    }),
  );
  return r;
}

/**
 * Whether the stack a {@link probeStackStatus} report describes is up: its supervisor runs and
 * every service it records is `ready` as probed now. `gatehouse stack status` exits 0 when it is
 * and 1 ("the answer is no") when it is not — no supervisor, or a service starting, exited,
 * crash-looping, `not-ready` or `not-answering` — so a script or a health check can act on it.
 */
export function stackIsUp(r: StackStatusReport): boolean {
  const services = Object.values(r.services);
  return r.supervisorPid !== null && services.length > 0 && services.every((s) => s.state === 'ready');
}

/**
 * Lines describing the stack kept in `dir`: whether its supervisor runs, then each service's
 * state (probed now, {@link probeStackStatus}), restart count and last exit.
 */
export async function stackStatus(dir: string): Promise<string[]> {
  return formatStackStatus(await probeStackStatus(dir));
}

/** The lines of {@link stackStatus} for a report already probed. */
export function formatStackStatus(r: StackStatusReport): string[] {
  const dir = r.dir;
  if (r.supervisorPid === null)
    return r.unsupervised.length
      ? [
          `no stack supervisor running for ${dir}, but these services still run unsupervised: ${r.unsupervised.join(', ')}`,
          '  stop them with: ./run stack down',
        ]
      : [`no stack supervisor running for ${dir}`];
  return [
    `supervisor pid ${r.supervisorPid} (${dir})`,
    ...Object.entries(r.services).map(
      ([name, s]) =>
        `  ${name.padEnd(15)} ${s.state.padEnd(13)} restarts ${s.restarts}${s.lastExit ? `, last exit ${s.lastExit} at ${s.lastExitAt}` : ''}${s.lastError ? ` (${s.lastError})` : ''}${s.crashLoopAt ? `, crash loop reported at ${s.crashLoopAt}` : ''}${
          s.failing && Object.keys(s.failing).length
            ? `, ${s.state === 'needs-operator' ? 'needs an operator for' : 'waiting for'} ${Object.entries(s.failing)
                .map(([check, why]) => `${check} (${why})`)
                .join('; ')}`
            : ''
        }`,
    ),
  ];
}

/**
 * Stops the stack kept in `dir`: SIGTERM to its supervisor (which ends supervision, then stops
 * every service), SIGKILL after `graceMs` + 5 s, then any service a dead supervisor left behind
 * (by pid file). Resolves with the services that were running.
 */
export async function stopStack(dir: string, graceMs = 10_000): Promise<string[]> {
  const running = SERVICES.map((s) => s.name).filter((name) => stackPid(dir, name) !== undefined);
  const supervisor = stackPid(dir, 'supervisor');
  if (supervisor !== undefined) {
    process.kill(supervisor, 'SIGTERM');
    const until = Date.now() + graceMs + 5000;
    while (alive(supervisor) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    if (alive(supervisor)) process.kill(supervisor, 'SIGKILL');
  }
  rmSync(resolve(dir, 'supervisor.pid'), { force: true });
  rmSync(resolve(dir, 'status.json'), { force: true });
  const leftovers = await stopLeftovers(dir, graceMs);
  return [...new Set([...running, ...leftovers])];
}

/** Services still running by their pid files (a supervisor that died): SIGTERM, SIGKILL after `graceMs`. */
async function stopLeftovers(dir: string, graceMs: number): Promise<string[]> {
  const stopped: string[] = [];
  for (const spec of [...SERVICES].reverse()) {
    const pid = stackPid(dir, spec.name);
    rmSync(resolve(dir, `${spec.name}.pid`), { force: true });
    if (pid === undefined) continue;
    process.kill(pid, 'SIGTERM');
    const until = Date.now() + graceMs;
    while (alive(pid) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    if (alive(pid)) process.kill(pid!, 'SIGKILL');
    stopped.push(spec.name);
  }
  return stopped;
}

/** The file a stack process of `name` runs: the supervisor's daemon, or the service's entry (relative to the repository). */
function entryOf(name: string): string | undefined {
  return name === 'supervisor' ? 'apps/cli/src/stack-daemon.ts' : SERVICES.find((s) => s.name === name)?.entry;
}

/**
 * The command line of process `pid` (its arguments joined by spaces): `/proc/<pid>/cmdline`, else
 * `ps -o args=`; undefined when neither tells (no such process, or no way to ask).
 */
function commandLineOf(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    // not Linux, or the process is gone
  }
  try {
    return execFileSync('ps', ['-o', 'args=', '-p', String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return undefined;
  }
}

/**
 * The pid `<dir>/<name>.pid` names, when that process is alive and is still the stack's `name`:
 * its command line names the supervisor's daemon or the service's entry file. A pid file outlives
 * its process (a machine that rebooted, a supervisor killed with SIGKILL), and its pid may since
 * belong to another program: that one is never signalled, nor reported as the stack's. When the
 * command line cannot be read at all, a live process is taken as the stack's (as before).
 */
export function stackPid(dir: string, name: string): number | undefined {
  const pid = pidIn(dir, name);
  if (!alive(pid)) return undefined;
  const cmd = commandLineOf(pid!);
  if (cmd === undefined) return alive(pid) ? pid : undefined;
  const entry = entryOf(name);
  return entry === undefined || cmd.includes(entry) ? pid : undefined;
}

function pidIn(dir: string, name: string): number | undefined {
  const file = resolve(dir, `${name}.pid`);
  return existsSync(file) ? Number(readFileSync(file, 'utf8')) : undefined;
}

/** Whether a process with this pid exists (signal 0). */
export function alive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
