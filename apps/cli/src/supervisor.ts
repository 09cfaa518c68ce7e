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
  | { type: 'not-ready'; service: string; restarts: number; failing: Record<string, string>; needsOperator: string[] };

/** The hooks a supervised service needs from its stack. */
export interface SupervisionHooks {
  /** Starts a new process of the service (with its current environment). */
  spawn: () => ChildProcess;
  /** Resolves when `child` answers `/readyz`; rejects when it exits first or after the deadline. */
  waitReady: (child: ChildProcess) => Promise<void>;
  log: Logger;
  emit: (event: StackEvent) => void;
}

/**
 * One service under supervision: the current process, and what happens when it exits. A
 * process started by the supervisor itself is supervised from its start; one the stack started
 * (first start, `restart`) once it has been ready, so a service that cannot start at all is an
 * error for the caller, not a silent loop. `hold` suspends supervision until `release`.
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
  readonly #enabled: boolean;
  readonly #hooks: SupervisionHooks;

  /** `enabled` false: exits are logged, never restarted. */
  constructor(name: string, policy: RestartPolicy, enabled: boolean, hooks: SupervisionHooks) {
    this.name = name;
    this.#policy = policy;
    this.#enabled = enabled;
    this.#hooks = hooks;
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
    void this.#hooks.waitReady(child).then(
      () => this.#ready(child),
      (err: unknown) => {
        // Alive but never ready: a liveness failure; kill it and let the exit restart it.
        if (child.exitCode !== null || child.signalCode !== null) return;
        this.#hooks.log.warn({ supervised: this.name, err: String(err) }, `${this.name} did not become ready; killing it`);
        child.kill('SIGKILL');
      },
    );
  }
}
