import type { Job, Worker } from 'bullmq';
import { testFaults } from '@gatehouse/contracts';
import type { Db } from '@gatehouse/ledger';
import type { Logger } from './logger.ts';
import type { PostgresGate } from './postgres-gate.ts';
import { handBack } from './hand-back.ts';
import type { JobHold } from './queues.ts';

/** Options of {@link DrainGate}; durations in milliseconds. */
export interface DrainGateOptions {
  /** How often the ledger's `releases.draining` of this release is read (default 2000). */
  pollMs?: number;
  /** How far a job fetched while the release drains is delayed (default 5000). */
  deferMs?: number;
}

/**
 * Holds this process's workers while the ledger marks its release draining
 * (docs/decisions/0480-drain-held-by-the-ledger.md). `gatehouse queues drain` pauses the
 * release's queues in Redis, which stops every worker at once, and marks the release draining in
 * the ledger; a Redis that restarts empty forgets the pause, and the watchdog then re-drives the
 * runs whose jobs were lost into queues no longer paused. The ledger's mark is what lasts: this
 * gate reads it every `pollMs` and keeps the attached workers paused in this process while it is
 * set, and a job fetched in the meantime goes back delayed without consuming an attempt. Unset
 * again (`queues resume`, `release activate`, a rollback to it) the workers resume within a poll.
 * A failed read keeps the last answer (the Postgres gate handles the outage itself).
 */
export class DrainGate implements JobHold {
  readonly #db: Db;
  readonly #release: string;
  readonly #log: Logger;
  readonly #opts: Required<DrainGateOptions>;
  readonly #workers = new Set<Worker>();
  readonly #postgres: PostgresGate | undefined;
  #draining = false;
  #first: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** The test-only switch: the gate never holds (`GATEHOUSE_TEST_DISABLE_DRAIN_GATE`). */
  readonly #disabled: boolean;

  /** @throws Error when `GATEHOUSE_TEST_DISABLE_DRAIN_GATE` is set outside `GATEHOUSE_ENV=test`. */
  constructor(db: Db, release: string, log: Logger, opts: DrainGateOptions & { postgres?: PostgresGate } = {}) {
    this.#db = db;
    this.#postgres = opts.postgres;
    // Postgres coming back must not resume workers held by a drain, nor this gate ones held by an outage.
    opts.postgres?.alsoHeldBy(() => this.draining);
    this.#release = release;
    this.#log = log;
    this.#disabled = testFaults().disableDrainGate;
    this.#opts = { pollMs: opts.pollMs ?? 2000, deferMs: opts.deferMs ?? 5000 };
  }

  /** Whether the ledger marked this release draining at the last read. */
  get draining(): boolean {
    return this.#draining && !this.#disabled;
  }

  /**
   * Reads the mark now and then every `pollMs` (the timer does not keep the process alive).
   * {@link holds} waits for the first read, so a process started during a drain takes nothing.
   */
  start(): Promise<void> {
    this.#first ??= this.refresh().finally(() => this.#schedule());
    return this.#first;
  }

  /** Whether a job fetched now must be held: the release drains (after the first read). */
  async holds(): Promise<boolean> {
    await this.start();
    return this.draining;
  }

  /** Reads `releases.draining` of this release once and pauses or resumes the attached workers. */
  async refresh(): Promise<void> {
    let draining: boolean;
    try {
      const row = await this.#db.selectFrom('releases').select('draining').where('id', '=', this.#release).executeTakeFirst();
      draining = row?.draining === true;
    } catch (err) {
      this.#log.debug({ err: (err as Error).message }, 'drain mark not read; keeping the last answer');
      return;
    }
    if (this.#closed || draining === this.#draining) return;
    this.#draining = draining;
    if (this.#disabled) return;
    this.#log.warn(
      { release: this.#release, workers: this.#workers.size },
      draining ? 'release draining: workers paused' : 'release no longer draining: workers resumed',
    );
    for (const w of this.#workers) void this.#apply(w);
  }

  /** Keeps `worker` paused in this process while the release drains. */
  attach(worker: Worker): void {
    this.#workers.add(worker);
    worker.once('closing', () => this.#workers.delete(worker));
    if (this.draining) void this.#apply(worker);
  }

  /**
   * Puts `job`, fetched while the release drains, back as delayed by `deferMs` without consuming
   * an attempt.
   * @throws DelayedError always — the processor must let it propagate (BullMQ's protocol).
   */
  async hold(job: Job, token: string | undefined): Promise<never> {
    this.#log.info({ queue: job.queueName, jobId: job.id, release: this.#release }, 'job held: release draining');
    return handBack(job, token, this.#opts.deferMs, `held: release ${this.#release} is draining`);
  }

  /** Stops polling (the workers are closed by their owner). */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#workers.clear();
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => void this.refresh().finally(() => this.#schedule()), this.#opts.pollMs);
    this.#timer.unref();
  }

  async #apply(worker: Worker): Promise<void> {
    try {
      // Without waiting for active jobs: a drain lets running jobs finish.
      if (this.draining) await worker.pause(true);
      else if (this.#postgres?.state.up !== false) worker.resume();
    } catch (err) {
      this.#log.warn({ err: (err as Error).message }, 'worker pause or resume failed');
    }
  }
}
