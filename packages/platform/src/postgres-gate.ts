import type { Job, Worker } from 'bullmq';
import { isConnectionFault, isPoolAcquireTimeout, type Db } from '@gatehouse/ledger';
import type { Logger } from './logger.ts';
import { markOutage } from './outage-hold.ts';
import { handBack } from './hand-back.ts';
import { within } from './timeout.ts';
import { testFaults } from '@gatehouse/contracts';

/**
 * `GATEHOUSE_TEST_DISABLE_PG_GATE=1` removes the gate (a control-removed test shows a job that
 * meets an outage spending its attempts into the dead letter).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function gateDisabled(): boolean {
  return testFaults().disablePgGate;
}

/** Options of {@link PostgresGate}; every duration in milliseconds. */
export interface PostgresGateOptions {
  /** How long one probe (`SELECT 1`) may take before it counts as failing (default 1500: within the readiness timeout). */
  probeTimeoutMs?: number;
  /** How often Postgres is probed while it is down (default 1000). */
  pollMs?: number;
  /** How long a successful probe is trusted before the next job probes again (default 500). */
  freshMs?: number;
  /** How far a job handed back unattempted is delayed (default 2000). */
  deferMs?: number;
  /**
   * Times one job may be handed back unattempted before a connection fault counts as an attempt
   * after all (default 100): a job that itself breaks its connection cannot loop for ever.
   */
  maxDeferrals?: number;
}

/** What the gate knows of Postgres: up, or down since `since` (epoch ms) for `reason`. */
export type PostgresState = { up: true } | { up: false; since: number; reason: string };

/**
 * The one place that decides whether this process's workers take jobs. While Postgres does not
 * answer, the attached BullMQ workers are paused and a job already fetched goes back to the queue
 * delayed, without consuming an attempt (so an outage cannot push runs into the dead letter);
 * a poll resumes the workers once Postgres answers again. `/readyz` reports the same state.
 */
export class PostgresGate {
  readonly #db: Db;
  readonly #log: Logger;
  readonly #opts: Required<PostgresGateOptions>;
  readonly #workers = new Set<Worker>();
  #state: PostgresState = { up: true };
  #lastOkMs = 0;
  /** When a pooled client last lost its connection (epoch ms; 0: never). */
  #lastClientFaultMs = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Whether another gate holds the workers (the drain gate): then they stay paused when Postgres is back. */
  #heldElsewhere: () => boolean = () => false;
  /** The test-only switch: the gate always lets jobs through and never defers. */
  readonly #disabled: boolean;

  /** @throws Error when `GATEHOUSE_TEST_DISABLE_PG_GATE` is set outside `GATEHOUSE_ENV=test`. */
  constructor(db: Db, log: Logger, opts: PostgresGateOptions = {}) {
    this.#db = db;
    this.#log = log;
    this.#disabled = gateDisabled();
    this.#opts = { probeTimeoutMs: 1500, pollMs: 1000, freshMs: 500, deferMs: 2000, maxDeferrals: 100, ...opts };
  }

  /** The current state (no probe). */
  get state(): PostgresState {
    return this.#state;
  }

  /** Pauses `worker` whenever Postgres is down and resumes it when it answers again. */
  attach(worker: Worker): void {
    this.#workers.add(worker);
    worker.once('closing', () => this.#workers.delete(worker));
    if (!this.#state.up) void this.#pause(worker);
  }

  /**
   * Names another reason to keep the workers paused (the {@link DrainGate}'s): when Postgres
   * answers again, a worker is resumed only if `held` returns false.
   */
  alsoHeldBy(held: () => boolean): void {
    this.#heldElsewhere = held;
  }

  /** Notes that a pooled client lost its connection (wire to `createDb`'s `onClientError`). */
  noteClientFault(): void {
    this.#lastClientFaultMs = Date.now();
  }

  /**
   * The readiness check: probes Postgres (a connection fault marks it down).
   * @throws Error saying since when Postgres is down and that the workers are paused, or the
   *   probe's own error (e.g. its timeout).
   */
  readyCheck = async (): Promise<void> => {
    if (this.#state.up) {
      try {
        return await this.#probe();
      } catch (err) {
        if (this.#disabled || !isConnectionFault(err)) throw err;
        this.#markDown(err);
      }
    }
    const s = this.#state as { since: number; reason: string };
    throw new Error(`postgres unreachable since ${new Date(s.since).toISOString()} (${s.reason}); workers paused`);
  };

  /**
   * False when Postgres is down. While it is marked down, false without a probe (the poll
   * decides when it is back); otherwise a probe younger than `freshMs` is reused unless `fresh`.
   * Only a connection fault marks Postgres down: a probe that is slow (a busy pool) lets the job
   * run, whose own statements then tell.
   */
  async answers(opts: { fresh?: boolean } = {}): Promise<boolean> {
    if (this.#disabled) return true;
    if (!this.#state.up) return false;
    if (!opts.fresh && Date.now() - this.#lastOkMs < this.#opts.freshMs) return true;
    try {
      await this.#probe();
      return true;
    } catch (err) {
      if (!isConnectionFault(err)) return true;
      this.#markDown(err);
      return false;
    }
  }

  /**
   * Whether a job that failed with the connection fault `err` goes back unattempted: `err` is a
   * pool checkout that waited past its bound (`isPoolAcquireTimeout`: the pool was full, a wait on
   * this process, not the job's fault: ADR 0787), Postgres does not answer now, or a pooled client
   * lost its connection since the job started (`startedMs`, epoch ms) — a restart that is already
   * over, or a terminated backend. Never past `maxDeferrals` hand-backs of one job.
   */
  async shouldDefer(job: Job, startedMs: number, err?: unknown): Promise<boolean> {
    if (this.#disabled) return false;
    if (job.attemptsStarted - job.attemptsMade > this.#opts.maxDeferrals) return false;
    if (isPoolAcquireTimeout(err)) return true;
    return !(await this.answers({ fresh: true })) || this.#lastClientFaultMs >= startedMs;
  }

  /**
   * Puts `job` back as delayed by `deferMs` without consuming an attempt.
   * @throws DelayedError always — the processor must let it propagate (BullMQ's protocol).
   */
  async defer(job: Job, token: string | undefined, why: string): Promise<never> {
    this.#log.warn({ queue: job.queueName, jobId: job.id, why }, 'job handed back unattempted: postgres unavailable');
    // The wait is not the run's working time: the job carries the outage (ADR 0110).
    await markOutage(job, 'postgres', this.#state.up ? Date.now() : this.#state.since);
    return handBack(job, token, this.#opts.deferMs, `deferred: ${why}`);
  }

  /** Stops polling (the workers are closed by their owner). */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#workers.clear();
  }

  async #probe(): Promise<void> {
    await within(this.#db.selectNoFrom((eb) => eb.val(1).as('one')).execute(), this.#opts.probeTimeoutMs);
    this.#lastOkMs = Date.now();
  }

  #markDown(err: unknown): void {
    if (!this.#state.up || this.#closed) return;
    const reason = err instanceof Error ? err.message : String(err);
    this.#state = { up: false, since: Date.now(), reason };
    this.#log.error({ reason, workers: this.#workers.size }, 'postgres unreachable: workers paused');
    for (const w of this.#workers) void this.#pause(w);
    this.#poll();
  }

  #poll(): void {
    this.#timer = setTimeout(() => {
      this.#probe().then(
        () => this.#markUp(),
        () => {
          if (!this.#closed) this.#poll();
        },
      );
    }, this.#opts.pollMs);
    this.#timer.unref();
  }

  #markUp(): void {
    if (this.#state.up || this.#closed) return;
    const downMs = Date.now() - this.#state.since;
    this.#state = { up: true };
    const held = this.#heldElsewhere();
    this.#log.warn(
      { downMs, workers: this.#workers.size, held },
      held ? 'postgres answers again: workers stay paused' : 'postgres answers again: workers resumed',
    );
    if (!held) for (const w of this.#workers) w.resume();
  }

  async #pause(worker: Worker): Promise<void> {
    // Without waiting for active jobs: this runs inside one of them.
    await worker.pause(true).catch((err: unknown) => this.#log.warn({ err: (err as Error).message }, 'worker pause failed'));
  }
}
