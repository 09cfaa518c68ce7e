import type { ChildProcess } from 'node:child_process';
import type { Logger } from '@gatehouse/platform';

/**
 * How a supervisor restarts a process that exits: exponential backoff from `initialMs`, doubled
 * per restart in a row, capped at `maxMs`; the row starts again once a process has stayed ready
 * for `stableAfterMs`. `crashLoopAfter` restarts in a row are reported as a crash loop (restarts
 * go on at the capped delay, as Kubernetes does). Durations in ms.
 */
export interface RestartPolicy {
  initialMs: number;
  maxMs: number;
  stableAfterMs: number;
  crashLoopAfter: number;
}

/** 0.5 s, 1 s, 2 s … 30 s; stable after a minute up; a crash loop after 5 restarts in a row. */
export const DEFAULT_RESTART_POLICY: RestartPolicy = { initialMs: 500, maxMs: 30_000, stableAfterMs: 60_000, crashLoopAfter: 5 };

/**
 * The liveness rule of a process the supervisor (re)started itself, until it is ready (ADR 0739):
 * it is probed every `periodMs`; a probe it answers — `/readyz` answered as the service, 200 or
 * 503, or, before it ever answered `/readyz`, the supervisor's ping over IPC — shows it alive; one
 * that answers neither for `windowMs` on end (each probe waiting up to the probe timeout) is hung,
 * and is killed (SIGKILL) and restarted. Until its first answer it has `startupMs` instead (loading
 * its code blocks the event loop; on a busy machine that takes more than the window, as a
 * Kubernetes startup probe allows). How long it waits for a dependency does not count. Ms.
 */
export interface LivenessPolicy {
  startupMs: number;
  windowMs: number;
  periodMs: number;
  /**
   * Once ready (ADR 0760): `/healthz` is probed every `healthPeriodMs` (a probe waits up to
   * `READY_PROBE_TIMEOUT_MS`, 3 s); `healthFailures` failed probes in a row make the process hung,
   * and it is killed (SIGKILL) and restarted — at most `healthFailures × healthPeriodMs` + 3 s after
   * it stopped answering. The same numbers as the Kubernetes manifests' livenessProbe.
   */
  healthPeriodMs: number;
  healthFailures: number;
}

/**
 * Two minutes to a first answer (the stack's default ready timeout); then hung after 30 s without
 * one (Kubernetes' default liveness probe: 3 failures 10 s apart); probed every second. Once ready,
 * `/healthz` every 10 s, hung after 3 failures in a row (deploy/k8s livenessProbe: periodSeconds
 * 10, timeoutSeconds 3, failureThreshold 3), so killed within 33 s of its last answer.
 */
export const DEFAULT_LIVENESS: LivenessPolicy = {
  startupMs: 120_000,
  windowMs: 30_000,
  periodMs: 1_000,
  healthPeriodMs: 10_000,
  healthFailures: 3,
};

/**
 * What one probe of a process that is not ready yet found: `ready`; `not-ready` (its `/readyz`
 * answered 503 naming the failing checks, check → reason, and those only an operator clears,
 * ADR 0729); `booting` (it does not listen yet but answers the supervisor's ping: alive, e.g. a boot
 * step waiting for Postgres, ADR 0653; `failing` names that wait when its log says so); `no-answer`.
 */
export type StartProbe =
  | { state: 'ready' }
  | { state: 'not-ready'; failing: Record<string, string>; needsOperator: string[] }
  | { state: 'booting'; failing: Record<string, string> }
  | { state: 'no-answer' };

/** What a stack reports while it starts and supervises its services (for progress and tests). */
export type StackEvent =
  | { type: 'starting'; service: string; restarts: number }
  | { type: 'ready'; service: string; restarts: number }
  | { type: 'exited'; service: string; code: number | null; signal: string | null; restarts: number; delayMs: number | null }
  | { type: 'crash-loop'; service: string; restarts: number }
  /**
   * Its `/readyz` answered 503 with other failing checks than before (check → reason); `needsOperator`
   * the failing checks that will not pass by themselves (the wait for it ends, ADR 0729).
   */
  | { type: 'not-ready'; service: string; restarts: number; failing: Record<string, string>; needsOperator: string[] }
  /**
   * A supervised process waits on checks only an operator clears (`needsOperator`, ADR 0729):
   * reported once per process, which is left running (it becomes ready once the operator acts, ADR 0739).
   */
  | { type: 'needs-operator'; service: string; restarts: number; failing: Record<string, string>; needsOperator: string[] };

/** The hooks a supervised service needs from its stack. */
export interface SupervisionHooks {
  /** Starts a new process of the service (with its current environment). */
  spawn: () => ChildProcess;
  /** Resolves when `child` answers `/readyz`; rejects when it exits first or after the deadline. */
  waitReady: (child: ChildProcess) => Promise<void>;
  /**
   * One probe of a process the supervisor started that is not ready yet; `ping` whether to ask
   * over IPC when `/readyz` does not answer (only before it ever answered it). Never rejects.
   */
  probe: (child: ChildProcess, ping: boolean) => Promise<StartProbe>;
  /**
   * The liveness probe of a ready process (ADR 0760): whether `child` answers `GET /healthz` as
   * the service within the probe timeout. Never rejects.
   */
  healthy: (child: ChildProcess) => Promise<boolean>;
  log: Logger;
  emit: (event: StackEvent) => void;
}

/**
 * One service under supervision: the current process, and what happens when it exits. A
 * process started by the supervisor itself is supervised from its start, and probed until it is
 * ready by the liveness rule ({@link LivenessPolicy}, ADR 0739: left running while it answers,
 * killed once it answers nothing for the window); one the stack started (first start, `restart`)
 * once it has been ready, so a service that cannot start at all is an error for the caller, not a
 * silent loop. `hold` suspends supervision until `release`.
 */
export class SupervisedService {
  child: ChildProcess | undefined;
  /** Restarts made by the supervisor since the stack started (not counting `restart` calls). */
  restarts = 0;
  #streak = 0;
  #readyAt: number | undefined;
  #timer: NodeJS.Timeout | undefined;
  #held = false;
  #stopping = false;
  readonly #supervised = new WeakSet<ChildProcess>();

  readonly name: string;
  readonly #policy: RestartPolicy;
  readonly #liveness: LivenessPolicy;
  readonly #enabled: boolean;
  readonly #hooks: SupervisionHooks;

  /** `enabled` false: exits are logged, never restarted. */
  constructor(name: string, policy: RestartPolicy, enabled: boolean, hooks: SupervisionHooks, liveness: LivenessPolicy = DEFAULT_LIVENESS) {
    this.name = name;
    this.#policy = policy;
    this.#enabled = enabled;
    this.#hooks = hooks;
    this.#liveness = liveness;
  }

  /**
   * Starts a process on behalf of the caller and resolves once it is ready (supervised from then on).
   * @throws Error from `waitReady` when it exits first or is not ready in time (not supervised).
   */
  async start(): Promise<void> {
    clearTimeout(this.#timer);
    const child = this.#spawn();
    await this.#hooks.waitReady(child);
    this.#ready(child);
  }

  /** Suspends supervision: the service is not restarted when it exits, until `release`. */
  hold(): void {
    this.#held = true;
    clearTimeout(this.#timer);
  }

  /** Ends a `hold`. */
  release(): void {
    this.#held = false;
  }

  /** For good: no restart after this (the stack is stopping). */
  stopSupervising(): void {
    this.#stopping = true;
    clearTimeout(this.#timer);
  }

  #spawn(): ChildProcess {
    const child = this.#hooks.spawn();
    this.child = child;
    this.#readyAt = undefined;
    this.#hooks.emit({ type: 'starting', service: this.name, restarts: this.restarts });
    child.once('exit', (code, signal) => this.#exited(child, code, signal));
    return child;
  }

  #ready(child: ChildProcess): void {
    if (child !== this.child || child.exitCode !== null || child.signalCode !== null) return;
    this.#readyAt = Date.now();
    this.#supervised.add(child);
    this.#hooks.emit({ type: 'ready', service: this.name, restarts: this.restarts });
    if (this.restarts > 0) this.#hooks.log.info({ supervised: this.name, restarts: this.restarts }, `${this.name} is ready again`);
    void this.#watchLive(child);
  }

  #exited(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (child !== this.child) return; // replaced by a restart: the caller killed it on purpose
    const how = signal ? `signal ${signal}` : `code ${code}`;
    const base = { supervised: this.name, exitCode: code, signal, restarts: this.restarts };
    const skip = this.#stopping
      ? 'the stack is stopping'
      : !this.#enabled
        ? 'supervision is off'
        : this.#held
          ? 'supervision is held'
          : !this.#supervised.has(child)
            ? 'it was never ready'
            : undefined;
    if (skip) {
      if (!this.#stopping) this.#hooks.log.warn(base, `${this.name} exited (${how}); not restarted: ${skip}`);
      this.#hooks.emit({ type: 'exited', service: this.name, code, signal, restarts: this.restarts, delayMs: null });
      return;
    }
    if (this.#readyAt !== undefined && Date.now() - this.#readyAt >= this.#policy.stableAfterMs) this.#streak = 0;
    const delayMs = Math.min(this.#policy.maxMs, this.#policy.initialMs * 2 ** this.#streak);
    this.#streak += 1;
    this.restarts += 1;
    this.#hooks.log.warn(
      { ...base, restarts: this.restarts, delayMs },
      `${this.name} exited (${how}); restart ${this.restarts} in ${delayMs} ms`,
    );
    this.#hooks.emit({ type: 'exited', service: this.name, code, signal, restarts: this.restarts, delayMs });
    if (this.#streak === this.#policy.crashLoopAfter) {
      this.#hooks.log.error(
        { supervised: this.name, restarts: this.restarts, inARow: this.#streak },
        `${this.name} is crash-looping: ${this.#streak} restarts in a row without staying up; still retrying every ${this.#policy.maxMs} ms at most`,
      );
      this.#hooks.emit({ type: 'crash-loop', service: this.name, restarts: this.restarts });
    }
    this.#timer = setTimeout(() => this.#relaunch(), delayMs);
  }

  #relaunch(): void {
    if (this.#stopping || this.#held) return;
    const child = this.#spawn();
    this.#supervised.add(child);
    void this.#watchStart(child);
  }

  /** Whether `child` is no longer this service's live process (it exited, was replaced, or the stack stops). */
  #gone(child: ChildProcess): boolean {
    return child !== this.child || this.#stopping || child.exitCode !== null || child.signalCode !== null;
  }

  /**
   * Probes a process the supervisor started until it is ready, by the liveness rule
   * ({@link LivenessPolicy}, ADR 0739): one that answers is left running however long it waits —
   * each change of what it waits for is logged and emitted (`not-ready`), a wait only an operator
   * ends once (`needs-operator`) — and one that answers nothing for the window is killed.
   */
  async #watchStart(child: ChildProcess): Promise<void> {
    const { startupMs, windowMs, periodMs } = this.#liveness;
    const startedAt = Date.now();
    let answeredAt: number | undefined;
    let answeredHttp = false;
    let waitingFor = '';
    let operatorTold = false;
    for (;;) {
      if (this.#gone(child)) return;
      const probe = await this.#hooks.probe(child, !answeredHttp);
      if (this.#gone(child)) return;
      if (probe.state === 'ready') return this.#ready(child);
      if (probe.state === 'no-answer') {
        const silentMs = Date.now() - (answeredAt ?? startedAt);
        if (silentMs >= (answeredAt === undefined ? Math.max(startupMs, windowMs) : windowMs)) return this.#killHung(child, silentMs);
      } else {
        answeredAt = Date.now();
        answeredHttp ||= probe.state === 'not-ready';
        const needsOperator = probe.state === 'not-ready' ? probe.needsOperator : [];
        const key = Object.keys(probe.failing).join();
        if (key && key !== waitingFor) this.#waiting(probe.failing, needsOperator);
        waitingFor = key;
        if (needsOperator.length && !operatorTold) this.#needsOperator(probe.failing, needsOperator);
        operatorTold ||= needsOperator.length > 0;
      }
      await new Promise((r) => setTimeout(r, periodMs));
    }
  }

  /**
   * Probes a ready process's `/healthz` every `healthPeriodMs` (from one probe's start to the next)
   * until it is gone; `healthFailures` failures in a row kill it (ADR 0760). A held service is
   * probed but never killed (its holder keeps it as it is), nor is any with supervision off. What `/readyz` says does not count: a
   * process waiting for a dependency answers `/healthz`; only one whose event loop does not run
   * (stopped, blocked) fails it.
   */
  async #watchLive(child: ChildProcess): Promise<void> {
    const { healthPeriodMs, healthFailures } = this.#liveness;
    if (!this.#enabled) return; // nothing would restart it
    let failures = 0;
    let lastAnswer = Date.now();
    for (;;) {
      const startedAt = Date.now();
      if (this.#gone(child)) return;
      const healthy = await this.#hooks.healthy(child);
      if (this.#gone(child)) return;
      failures = healthy ? 0 : failures + 1;
      if (healthy) lastAnswer = Date.now();
      if (failures >= healthFailures && !this.#held) return this.#killHung(child, Date.now() - lastAnswer, failures);
      await new Promise((r) => setTimeout(r, Math.max(0, healthPeriodMs - (Date.now() - startedAt))));
    }
  }

  #waiting(failing: Record<string, string>, needsOperator: string[]): void {
    const what = Object.entries(failing).map(([check, why]) => `${check}: ${why}`);
    this.#hooks.log.info(
      { supervised: this.name, restarts: this.restarts, failing },
      `${this.name} is alive and waits (${what.join('; ')}); left running`,
    );
    this.#hooks.emit({ type: 'not-ready', service: this.name, restarts: this.restarts, failing, needsOperator });
  }

  #needsOperator(failing: Record<string, string>, needsOperator: string[]): void {
    const what = needsOperator.map((check) => `${check}: ${failing[check]}`);
    this.#hooks.log.error(
      { supervised: this.name, restarts: this.restarts, needsOperator, failing },
      `${this.name} needs an operator: its /readyz fails ${what.join('; ')}; not restarted (a restart would not clear it), it becomes ready once that is fixed`,
    );
    this.#hooks.emit({ type: 'needs-operator', service: this.name, restarts: this.restarts, failing, needsOperator });
  }

  /** Logs why and SIGKILLs `child` (its exit restarts it); `failures` the failed `/healthz` probes in a row of a ready process. */
  #killHung(child: ChildProcess, silentMs: number, failures?: number): void {
    const { windowMs, healthPeriodMs } = this.#liveness;
    const why =
      failures === undefined
        ? `did not answer for ${silentMs} ms (hung)`
        : `was ready but did not answer /healthz ${failures} times in a row, ${healthPeriodMs} ms apart (no answer for ${silentMs} ms: hung)`;
    this.#hooks.log.warn(
      { supervised: this.name, silentMs, ...(failures === undefined ? { windowMs } : { failures, healthPeriodMs }) },
      `${this.name} ${why}; killing it`,
    );
    child.kill('SIGKILL');
  }
}
