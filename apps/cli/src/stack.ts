import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';
import { createLogger, READY_CHECK_TIMEOUT_MS, type Logger } from '@gatehouse/platform';
import { delegationKeyPaths, ensureLocalDelegationKeys, type DelegationKeyPaths } from './delegation-keys.ts';
import { LIVENESS_PING, LIVENESS_PONG } from './liveness-protocol.ts';
import {
  DEFAULT_LIVENESS,
  DEFAULT_RESTART_POLICY,
  SupervisedService,
  type LivenessPolicy,
  type RestartPolicy,
  type StackEvent,
  type StartProbe,
} from './supervisor.ts';

export {
  DEFAULT_LIVENESS,
  DEFAULT_RESTART_POLICY,
  type LivenessPolicy,
  type RestartPolicy,
  type StackEvent,
  type StartProbe,
} from './supervisor.ts';

/** A service process of the stack, its entry file and the env var that sets its port. */
export interface ServiceSpec {
  name: string;
  entry: string;
  portVar: string;
  defaultPort: number;
}

/** Every process of the local stack (docs/product/public-contract.md default ports; worker-only services get health ports). */
export const SERVICES: readonly ServiceSpec[] = [
  { name: 'staging', entry: 'synthetic/staging/src/main.ts', portVar: 'STAGING_PORT', defaultPort: 7104 },
  { name: 'model-stub', entry: 'synthetic/model-stub/src/main.ts', portVar: 'MODEL_STUB_PORT', defaultPort: 7103 },
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

/** Preloaded first into every service process: answers the supervisor's liveness ping over IPC (ADR 0739). */
const LIVENESS_PRELOAD = resolve(repoRoot, 'apps/cli/src/liveness-answer.ts');

/** The folder under which stacks keep state (logs, pid files): `GATEHOUSE_STATE_DIR`, else `<repo>/.gatehouse`. */
export function stateRoot(env: Record<string, string | undefined> = process.env): string {
  return env.GATEHOUSE_STATE_DIR ? resolve(env.GATEHOUSE_STATE_DIR) : resolve(repoRoot, '.gatehouse');
}

/** Where a stack keeps logs and pid files: `<state root>/<name>`. */
export function stateDir(name = 'stack', env: Record<string, string | undefined> = process.env): string {
  return resolve(stateRoot(env), name);
}

/** Port of a service under `env` (its port variable, else the default). */
export function portOf(spec: ServiceSpec, env: Record<string, string | undefined>): number {
  return Number(env[spec.portVar] ?? spec.defaultPort);
}

/**
 * The staging systems' URL of a local stack under `env`: `STAGING_URL` when set, else the staging
 * service on its configured port (`STAGING_PORT`, default 7104) — a second stack on other ports
 * reaches its own systems of record, from its services and from the CLI alike.
 */
export function stagingUrlOf(env: Record<string, string | undefined>): string {
  return (
    env.STAGING_URL ??
    `http://127.0.0.1:${portOf(
      SERVICES.find((s) => s.name === 'staging')!,
      env,
    )}`
  );
}

/** A running stack: its processes and their ports, under supervision (see {@link startStack}). */
export interface RunningStack {
  /** The current process of each service (replaced when one is restarted). */
  processes: Map<string, ChildProcess>;
  ports: Record<string, number>;
  /** Ends supervision, then SIGTERM to every process, waiting up to `graceMs` (default 10 000 ms) before SIGKILL. */
  stop: (graceMs?: number) => Promise<void>;
  /**
   * Starts one service again (after it died or was killed; a live one is SIGKILLed first), with
   * `env` overrides merged into that service's environment (e.g. to drop a test hook), waits until
   * it is ready, and supervises it again (ends a `hold`).
   * @throws Error when the new process exits before it is ready or is not ready in time.
   */
  restart: (name: string, env?: Record<string, string | undefined>) => Promise<void>;
  /**
   * Sends `signal` (default SIGKILL) to a service's current process and resolves with how it
   * ended. The supervisor restarts it as after any crash, unless `keepDown` (a `hold` first):
   * then it stays down until `restart`.
   */
  kill: (name: string, signal?: NodeJS.Signals, opts?: { keepDown?: boolean }) => Promise<{ code: number | null; signal: string | null }>;
  /** Suspends supervision of one service until `restart(name)`: if it exits, it stays down. */
  hold: (name: string) => void;
  /** How many times the supervisor restarted `name` (explicit `restart` calls not counted). */
  restarts: (name: string) => number;
  /** Resolves when the service's current process answers `/readyz` (default `timeoutMs` 120 000). @throws Error after the deadline. */
  ready: (name: string, timeoutMs?: number) => Promise<void>;
}

/** Options of {@link startStack}. */
export interface StackOptions {
  env: Record<string, string | undefined>;
  /** Logs (`<service>.log`, `supervisor.log`) and pid files. */
  dir: string;
  /**
   * Per service, ms (default 120 000): how long a start by the caller (`startStack`, `restart`)
   * waits for it. A process the supervisor restarts has no such deadline: it is killed only when
   * it stops answering (`liveness`, ADR 0739).
   */
  readyTimeoutMs?: number;
  /** The liveness rule of processes the supervisor restarts (default {@link DEFAULT_LIVENESS}; `startupMs` the ready timeout). */
  liveness?: Partial<LivenessPolicy>;
  only?: string[];
  stopOnSignals?: boolean;
  /** Restart services that exit (default true); false: a dead service stays dead. */
  supervise?: boolean;
  restartPolicy?: Partial<RestartPolicy>;
  onEvent?: (event: StackEvent) => void;
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

/** What a service answers to `GET /readyz` when it is not ready (503): the failing checks and those only an operator clears. */
export interface NotReady {
  state: 'not-ready';
  /** Each failing check → its message (the service's reason, e.g. `anchorKey` → what to run). */
  failing: Record<string, string>;
  /** The failing checks that will not pass again by themselves (marked `needsOperator` by the service, ADR 0729). */
  needsOperator: string[];
}

/**
 * How long {@link probeReady} waits for `/readyz`, ms: a service answers it within
 * {@link READY_CHECK_TIMEOUT_MS} even when a dependency hangs (each check counts as failing at that
 * bound), so the probe waits that long plus 1 s for the answer to arrive on a busy machine. A
 * shorter wait reported every service of a stack whose Postgres or Redis hangs as a hung process
 * (`not-answering`) instead of `not-ready`, waiting for that dependency (docs/decisions/0730).
 */
export const READY_PROBE_TIMEOUT_MS = READY_CHECK_TIMEOUT_MS + 1000;

/**
 * What the process on `port` answers to `GET /readyz` within {@link READY_PROBE_TIMEOUT_MS}:
 * `ready`; `not-ready` with the checks it names as failing and which of them need an operator (it
 * answers as service `name`, 503: a dependency is down or hangs, or only an operator clears it); or
 * `no-answer` (not listening, another service, or a stopped or hung process: its socket accepts,
 * nothing answers).
 */
export async function probeReady(port: number, name: string): Promise<{ state: 'ready' } | NotReady | { state: 'no-answer' }> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(READY_PROBE_TIMEOUT_MS) });
    const body = (await res.json().catch(() => ({}))) as { service?: string; failing?: Record<string, string>; needsOperator?: string[] };
    if (body.service !== name) return { state: 'no-answer' };
    if (res.ok) return { state: 'ready' };
    const failing = body.failing ?? {};
    return { state: 'not-ready', failing, needsOperator: (body.needsOperator ?? []).filter((check) => check in failing) };
  } catch {
    return { state: 'no-answer' }; // not listening yet
  }
}

/**
 * The liveness probe of a ready service (ADR 0760): whether the process on `port` answers
 * `GET /healthz` as service `name` within {@link READY_PROBE_TIMEOUT_MS} (3 s, the Kubernetes
 * livenessProbe's timeoutSeconds). `/healthz` checks no dependency, so only a process whose event
 * loop does not run (stopped, blocked) fails it. Never rejects.
 */
async function answersHealthz(port: number, name: string): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(READY_PROBE_TIMEOUT_MS) });
    const body = (await res.json().catch(() => ({}))) as { service?: string };
    return res.ok && body.service === name;
  } catch {
    return false;
  }
}

/** Whether the process on `port` answers `GET /readyz` as service `name`, ready, within {@link READY_PROBE_TIMEOUT_MS} ({@link probeReady}). */
export async function isReady(port: number, name: string): Promise<boolean> {
  return (await probeReady(port, name)).state === 'ready';
}

const exited = (child: ChildProcess): boolean => child.exitCode !== null || child.signalCode !== null;

let lastPing = 0;

/**
 * Whether `child` answers the supervisor's liveness ping over its IPC channel within `timeoutMs`
 * (its event loop runs, whether or not it listens yet; the preload {@link LIVENESS_PRELOAD}
 * answers). False for a stopped or hung process, one that exited, or one without the channel.
 */
export function answersPing(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (!child.connected) return Promise.resolve(false);
  const id = ++lastPing;
  return new Promise<boolean>((done) => {
    const finish = (ok: boolean): void => {
      clearTimeout(timer);
      child.off('message', onMessage);
      done(ok);
    };
    const onMessage = (m: unknown): void => {
      const pong = m as { type?: string; id?: number } | null;
      if (pong?.type === LIVENESS_PONG && pong.id === id) finish(true);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    child.on('message', onMessage);
    try {
      child.send({ type: LIVENESS_PING, id }, (err) => err && finish(false));
    } catch {
      finish(false); // the channel closed meanwhile
    }
  });
}

/** The line `bootStep` (packages/platform) writes when a boot step starts waiting for a dependency. */
const BOOT_WAIT_MSG = 'boot step waits for a dependency';

/**
 * The boot wait a service's log names since `sinceMs` (epoch ms), as failing checks: the
 * dependency → `not listening yet: its boot step "<step>" waits for <dependency>`; empty when
 * its last lines name none (a process still loading its code).
 */
export function bootWaitIn(logFile: string, sinceMs: number): Record<string, string> {
  for (const line of logTail(logFile, 40).split('\n').reverse()) {
    if (!line.includes(BOOT_WAIT_MSG)) continue;
    try {
      const entry = JSON.parse(line) as { time?: number; msg?: string; step?: string; dependency?: string };
      if (entry.msg !== BOOT_WAIT_MSG || (entry.time ?? 0) < sinceMs) return {};
      const dependency = entry.dependency ?? 'dependency';
      return { [dependency]: `not listening yet: its boot step "${entry.step}" waits for ${dependency}` };
    } catch {
      return {};
    }
  }
  return {};
}

/**
 * One liveness probe of a supervised process that is not ready yet (ADR 0739): its `/readyz`
 * ({@link probeReady}); when that does not answer and `ping`, the IPC ping ({@link answersPing}),
 * which makes it `booting` (alive, not listening yet) with the boot wait its log names.
 */
async function probeStart(
  port: number,
  name: string,
  child: ChildProcess,
  logFile: string,
  sinceMs: number,
  ping: boolean,
): Promise<StartProbe> {
  const probe = await probeReady(port, name);
  if (probe.state !== 'no-answer' || !ping) return probe;
  if (!(await answersPing(child, READY_PROBE_TIMEOUT_MS))) return { state: 'no-answer' };
  return { state: 'booting', failing: bootWaitIn(logFile, sinceMs) };
}

/** The last `lines` lines of a service's log (empty when it cannot be read), for an error message. */
function logTail(file: string, lines = 15): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** `check: reason` of each failing check, for a message. */
function reasons(failing: Record<string, string>, checks: string[] = Object.keys(failing)): string {
  return checks.map((check) => `${check}: ${failing[check]}`).join('; ');
}

/**
 * Polls `/readyz` until the service answers as `name`, calling `onNotReady` each time the set of
 * failing checks it answers changes (so a caller can say at once which check fails, and why).
 * @throws Error when the process exits first (naming its log `logFile` and quoting its last
 * lines, so a CI run that keeps no temp folders still shows why); as soon as a failing check is
 * one only an operator clears (`needsOperator`, ADR 0729), naming it with its reason — waiting
 * would not end it; or after `deadlineMs`, with what `/readyz` said last.
 */
async function waitReady(
  port: number,
  deadlineMs: number,
  child: ChildProcess,
  name: string,
  logFile: string,
  onNotReady: (probe: NotReady) => void = () => {},
): Promise<void> {
  let last: NotReady | undefined;
  for (;;) {
    if (exited(child))
      throw new Error(
        `${name} exited (${child.signalCode ?? `code ${child.exitCode}`}) before it was ready; ${logFile} ends:\n${logTail(logFile)}`,
      );
    const probe = await probeReady(port, name);
    if (probe.state === 'ready') return;
    if (probe.state === 'not-ready') {
      if (Object.keys(probe.failing).join() !== Object.keys(last?.failing ?? {}).join()) onNotReady(probe);
      last = probe;
      if (probe.needsOperator.length)
        throw new Error(
          `${name} is not ready and will not become ready by itself — its /readyz fails ${reasons(probe.failing, probe.needsOperator)}`,
        );
    }
    if (Date.now() > deadlineMs)
      throw new Error(`${name} not ready on port ${port} in time${last ? `; its /readyz said last: ${reasons(last.failing)}` : ''}`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/** SIGTERM, SIGKILL after `graceMs`; resolves once the process is gone. */
function terminate(child: ChildProcess, graceMs: number): Promise<void> {
  return new Promise<void>((done) => {
    if (exited(child)) return done();
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      done();
    });
    child.kill('SIGTERM');
  });
}

/** Refuses to start over a port something else holds (a leftover stack would answer for us). */
async function assertPortsFree(selected: readonly ServiceSpec[], env: Record<string, string | undefined>): Promise<void> {
  for (const spec of selected) {
    const holder = await answers(portOf(spec, env));
    if (holder)
      throw new Error(
        holder === 'something'
          ? `port ${portOf(spec, env)} for ${spec.name} is held by another program; stop it, or give ${spec.name} another port (${spec.portVar}=<port>)`
          : `port ${portOf(spec, env)} for ${spec.name} is already in use by a Gatehouse ${holder}; stop the other stack first: ./run stack down`,
      );
  }
}

/** The supervisor's log: JSON lines appended (synchronously, so nothing is lost at exit) to `file`. */
function supervisorLog(file: string): Logger {
  const log = createLogger('supervisor', { write: (line: string) => appendFileSync(file, line) });
  log.level = 'info';
  return log;
}

/**
 * Starts every service (or `only` those) as a separate Node process with `env` (and the
 * telemetry preload), in order, logs to `<dir>/<service>.log`, and waits until each answers
 * `GET /readyz` (each with its own deadline `readyTimeoutMs`; reporting each change of its failing
 * checks as a `not-ready` event, and giving up at once on a check only an operator clears, ADR
 * 0729). Then supervises them: a service
 * that exits is restarted with capped exponential backoff (see {@link RestartPolicy}) and left
 * running while it answers, however long it waits, killed only when it answers nothing for the
 * liveness window ({@link LivenessPolicy}, ADR 0739) — or, once ready, fails `/healthz` three
 * times in a row, 10 s apart (ADR 0760) — each
 * exit and restart logged to `<dir>/supervisor.log` and reported to `onEvent`; `supervise: false`
 * leaves a dead service dead. The processes die with this one (stopped on SIGINT/SIGTERM/SIGHUP
 * with `stopOnSignals`); pid files go to `<dir>`. Refuses to start when a port already answers.
 * @throws Error naming the service that exited or did not become ready (all are stopped first).
 */
export async function startStack(opts: StackOptions): Promise<RunningStack> {
  mkdirSync(opts.dir, { recursive: true });
  const keys = delegationKeyPaths(opts.env, opts.dir);
  await ensureLocalDelegationKeys(opts.env, keys);
  const selected = SERVICES.filter((s) => !opts.only || opts.only.includes(s.name));
  await assertPortsFree(selected, opts.env);
  const readyTimeoutMs = opts.readyTimeoutMs ?? 120_000;
  const policy = { ...DEFAULT_RESTART_POLICY, ...opts.restartPolicy };
  const liveness = { ...DEFAULT_LIVENESS, startupMs: readyTimeoutMs, ...opts.liveness };
  const spawnedAt = new WeakMap<ChildProcess, number>();
  const log = supervisorLog(resolve(opts.dir, 'supervisor.log'));
  const emit = (event: StackEvent): void => opts.onEvent?.(event);
  const processes = new Map<string, ChildProcess>();
  const ports: Record<string, number> = {};
  const services = new Map<string, SupervisedService>();
  const envs = new Map<string, Record<string, string | undefined>>();
  for (const spec of selected) {
    ports[spec.name] = portOf(spec, opts.env);
    envs.set(spec.name, opts.env);
    const spawnIt = (): ChildProcess => {
      const env = serviceSecrets(spec.name, { ...envs.get(spec.name), [spec.portVar]: String(ports[spec.name]) }, keys);
      const child = spawnService(spec, env, opts.dir);
      spawnedAt.set(child, Date.now());
      processes.set(spec.name, child);
      return child;
    };
    const logFile = resolve(opts.dir, `${spec.name}.log`);
    const notReady = (probe: NotReady): void =>
      emit({ type: 'not-ready', service: spec.name, restarts: services.get(spec.name)?.restarts ?? 0, ...probe });
    const ready = (child: ChildProcess): Promise<void> =>
      waitReady(ports[spec.name]!, Date.now() + readyTimeoutMs, child, spec.name, logFile, notReady);
    const probe = (child: ChildProcess, ping: boolean): Promise<StartProbe> =>
      probeStart(ports[spec.name]!, spec.name, child, logFile, spawnedAt.get(child) ?? 0, ping);
    const healthy = (): Promise<boolean> => answersHealthz(ports[spec.name]!, spec.name);
    const hooks = { spawn: spawnIt, waitReady: ready, probe, healthy, log, emit };
    services.set(spec.name, new SupervisedService(spec.name, policy, opts.supervise ?? true, hooks, liveness));
  }
  const service = (name: string): SupervisedService => {
    const svc = services.get(name);
    if (!svc) throw new Error(`no service ${name} in this stack`);
    return svc;
  };
  const stop = async (graceMs = 10_000): Promise<void> => {
    for (const svc of services.values()) svc.stopSupervising();
    log.info({ services: [...services.keys()] }, 'stack stopping: supervision ended');
    await Promise.all([...processes.values()].map((child) => terminate(child, graceMs)));
    for (const name of processes.keys()) rmSync(resolve(opts.dir, `${name}.pid`), { force: true });
  };
  stopWithThisProcess(processes, services, opts.stopOnSignals ? stop : undefined);
  const start = (name: string): Promise<void> => service(name).start();
  try {
    // In order (the systems of record before the services that read them at start-up), each with
    // its own deadline: on a loaded machine one slow start must not eat the others' time.
    for (const spec of selected) await start(spec.name);
    log.info({ services: [...services.keys()], policy }, `stack up: supervising ${[...services.keys()].join(', ')}`);
  } catch (err) {
    await stop(2000);
    throw err;
  }
  const { kill, restart, ready } = stackControls(service, start, envs, ports);
  return { processes, ports, stop, restart, kill, hold: (name) => service(name).hold(), restarts: (name) => service(name).restarts, ready };
}

/**
 * The controls of a started stack: `kill` (a signal to a service's current process, resolving once
 * it exited with its exit code and signal; `keepDown` holds it down instead of restarting it),
 * `restart` (kill, merge `env` into the service's environment, start it again and wait until it is
 * ready) and `ready` (polls its `/readyz` every 150 ms).
 * @param service the stack's service by name; throws for a name the stack does not have.
 * @param start starts a service and waits until it is ready (its own deadline).
 * @param envs each service's environment, read at each spawn (`restart` changes it).
 * @param ports each service's port.
 * @throws Error from `ready` when the service does not answer ready within `timeoutMs`.
 */
function stackControls(
  service: (name: string) => SupervisedService,
  start: (name: string) => Promise<void>,
  envs: Map<string, Record<string, string | undefined>>,
  ports: Record<string, number>,
): Pick<RunningStack, 'kill' | 'restart' | 'ready'> {
  const kill: RunningStack['kill'] = async (name, signal = 'SIGKILL', killOpts = {}) => {
    const svc = service(name);
    if (killOpts.keepDown) svc.hold();
    const child = svc.child!;
    const gone = new Promise<void>((r) => (exited(child) ? r() : child.once('exit', () => r())));
    child.kill(signal);
    await gone;
    return { code: child.exitCode, signal: child.signalCode };
  };
  const restart: RunningStack['restart'] = async (name, env = {}) => {
    const svc = service(name);
    await kill(name, 'SIGKILL', { keepDown: true });
    envs.set(name, { ...envs.get(name), ...env });
    svc.release();
    await start(name);
  };
  const ready: RunningStack['ready'] = async (name, timeoutMs = 120_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await isReady(ports[name]!, name))) {
      if (Date.now() > deadline) throw new Error(`${name} not ready on port ${ports[name]} in time`);
      await new Promise((r) => setTimeout(r, 150));
    }
  };
  return { kill, restart, ready };
}

/** Variables naming delegation material; {@link serviceSecrets} hands each to one service at most. */
const DELEGATION_VARS = ['GATEHOUSE_DELEGATION_SECRET', 'GATEHOUSE_DELEGATION_SIGNING_KEY_PATH', 'GATEHOUSE_DELEGATION_JWKS_PATH'];

function withoutDelegation(env: Record<string, string | undefined>): Record<string, string | undefined> {
  const out = { ...env };
  for (const k of DELEGATION_VARS) delete out[k];
  return out;
}

/**
 * Each service gets only the delegation material it uses: the executor (the minting side) the
 * signing key's path, staging (the verifying side) the JWKS path, no other service either
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md). The retired shared secret
 * `GATEHOUSE_DELEGATION_SECRET` reaches none.
 */
export function serviceSecrets(
  service: string,
  env: Record<string, string | undefined>,
  keys: DelegationKeyPaths,
): Record<string, string | undefined> {
  const out = withoutDelegation(env);
  if (service === 'executor') out.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH = keys.signing;
  if (service === 'staging') out.GATEHOUSE_DELEGATION_JWKS_PATH = keys.jwks;
  return out;
}

/**
 * V8 heap settings of every service process (docs/decisions/0360-service-heap-settings.md): a 4 MB
 * semi-space (the young generation V8 keeps resident between scavenges) and a 192 MB cap on the
 * old generation, which also makes V8 collect earlier as the heap grows. Under the benchmark's
 * load they keep each service under 200 MB of RSS. The container image starts services with the
 * same flags in `NODE_OPTIONS` (deploy/Dockerfile; test/deploy/heap-flags.test.ts keeps the two
 * equal). A heap past the cap ends the process, and leases, redelivery and the watchdog recover
 * its work as after any crash.
 */
export const SERVICE_V8_FLAGS = ['--max-semi-space-size=4', '--max-old-space-size=192'] as const;

function spawnService(spec: ServiceSpec, env: Record<string, string | undefined>, dir: string): ChildProcess {
  const log = openSync(resolve(dir, `${spec.name}.log`), 'a');
  // The service's env replaces this process's delegation variables rather than adding to them.
  const inherited = withoutDelegation(process.env);
  const preloads = ['--import', LIVENESS_PRELOAD, '--import', TELEMETRY_PRELOAD];
  // The IPC channel carries the supervisor's liveness ping (ADR 0739).
  const child = spawn(process.execPath, [...SERVICE_V8_FLAGS, ...preloads, resolve(repoRoot, spec.entry)], {
    cwd: repoRoot,
    env: { ...inherited, ...env },
    stdio: ['ignore', log, log, 'ipc'],
  });
  closeSync(log);
  writeFileSync(resolve(dir, `${spec.name}.pid`), String(child.pid));
  return child;
}

/** The stack's processes die with this one, whatever ends it; with `stop`, also on SIGINT/SIGTERM/SIGHUP. */
function stopWithThisProcess(
  processes: Map<string, ChildProcess>,
  services: Map<string, SupervisedService>,
  stop: ((graceMs?: number) => Promise<void>) | undefined,
): void {
  process.once('exit', () => {
    for (const svc of services.values()) svc.stopSupervising();
    for (const child of processes.values()) if (!exited(child)) child.kill('SIGTERM');
  });
  if (!stop) return;
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      void stop(5000).finally(() => process.exit(130));
    });
  }
}
