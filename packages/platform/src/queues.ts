import { Queue, Worker, UnrecoverableError, type Job, type JobsOptions, type ConnectionOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { queueName, type QueueContract } from '@gatehouse/contracts';
import { messagingAttributes, recordDependencyError, recordJob, withJobSpan } from '@gatehouse/telemetry';
import { IllegalTransition, isConnectionFault } from '@gatehouse/ledger';
import type { Logger } from './logger.ts';
import { logThrottle } from './log-throttle.ts';
import type { DrainGate } from './drain-gate.ts';
import type { PostgresGate } from './postgres-gate.ts';
import { attachFairClock, fairPriority, forgetFairTags } from './tenant-fairness.ts';

/**
 * Opens an ioredis connection suitable for BullMQ workers (`maxRetriesPerRequest: null`: commands
 * wait while it reconnects). Its `error` events are handled: each counts as a `redis` dependency
 * error, and with `log` the first error of an outage is logged and the reconnection after it.
 */
export function createRedis(url: string, log?: Logger): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true });
  let failing = false;
  redis.on('error', (err: Error) => {
    recordDependencyError('redis', 'connection');
    if (!failing) log?.warn({ err: err.message }, 'redis connection lost; reconnecting');
    failing = true;
  });
  redis.on('ready', () => {
    if (failing) log?.warn('redis reconnected');
    failing = false;
  });
  return redis;
}

/**
 * Caches one BullMQ `Queue` per queue name, sharing one connection and key prefix.
 * Each queue's `error` events (its connection failing while Redis is down) go to `log` at warn,
 * once per 30 s per message ({@link logThrottle}); without `log` they are dropped, since the
 * connection's own handler ({@link createRedis}) reports the outage. Never to stderr unhandled.
 * Close with {@link QueueRegistry.close}.
 */
export class QueueRegistry {
  readonly connection: ConnectionOptions;
  readonly prefix: string;
  readonly #redis: Redis;
  readonly #queues = new Map<string, Queue>();
  readonly #log: Logger | undefined;
  readonly #throttle = logThrottle();

  constructor(connection: Redis, prefix: string, log?: Logger) {
    this.connection = connection;
    this.#redis = connection;
    this.prefix = prefix;
    this.#log = log;
  }

  /**
   * Adds job `jobName` with `payload` to queue `name` (BullMQ `add` with `opts`, whose `jobId`
   * makes a repeated add a no-op). With `fairKey` (the job's tenant) the job gets its tenant-fair
   * priority ({@link fairPriority}, one more Redis round trip), so tenants take the queue's workers
   * in turn; without one (a job of no tenant) it is plain FIFO and runs before prioritized jobs.
   * Every producer of workflow jobs adds through here: the outbox relay and the requeue.
   * @throws what BullMQ's `add` throws (Redis unavailable).
   */
  async add(name: string, jobName: string, payload: unknown, opts: JobsOptions, fairKey?: string | null): Promise<void> {
    const queue = this.get(name);
    const priority = fairKey ? await fairPriority(queue, this.#redis, fairKey) : undefined;
    await queue.add(jobName, payload, priority ? { ...opts, priority } : opts);
  }

  /**
   * Forgets the tenant-fair tags of queue `name` ({@link forgetFairTags}): for a queue whose queued
   * jobs were just removed without starting.
   * @throws what the Redis command throws.
   */
  async forgetFairTags(name: string): Promise<void> {
    await forgetFairTags(this.get(name), this.#redis);
  }

  /** The queue called `name` (e.g. `executions.rel-1`). */
  get(name: string): Queue {
    let q = this.#queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.connection, prefix: this.prefix });
      q.on('error', (err: Error) =>
        this.#throttle(err.message, (repeated) => this.#log?.warn({ err: err.message, repeated }, 'queue connection error')),
      );
      this.#queues.set(name, q);
    }
    return q;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#queues.values()].map((q) => q.close()));
    this.#queues.clear();
  }
}

/** Queues this process consumes (full name → contract base name), for the queue-depth gauge. */
const consumedQueues = new Map<string, string>();

/** The queues this process has started workers on: full name (`executions.rel-1`) → base name. */
export function consumedQueueNames(): ReadonlyMap<string, string> {
  return consumedQueues;
}

/** Job states the queue-depth gauge reports. */
const DEPTH_STATES = ['waiting', 'active', 'delayed', 'prioritized', 'failed'] as const;

/**
 * Job counts per consumed queue and state, for `gatehouse.queue.depth` (one Redis round trip
 * per queue). Uses the registry's queues (its connection and prefix).
 */
export async function readQueueDepth(registry: QueueRegistry): Promise<Array<{ queue: string; state: string; count: number }>> {
  const out: Array<{ queue: string; state: string; count: number }> = [];
  for (const [name, base] of consumedQueues) {
    const counts = await registry.get(name).getJobCounts(...DEPTH_STATES);
    for (const state of DEPTH_STATES) out.push({ queue: base, state, count: counts[state] ?? 0 });
  }
  return out;
}

/** Handler of one queue's jobs; receives the validated payload. */
export type JobHandler<T> = (payload: T, job: Job) => Promise<unknown>;

/** Options of {@link createWorker}. */
export interface WorkerOptions {
  release: string;
  prefix: string;
  redisUrl: string;
  log: Logger;
  /** Parallel jobs per worker (default 8). */
  concurrency?: number;
  /**
   * BullMQ lock duration in ms (default 15 000, renewed every half of it while the worker lives);
   * not a lease — see the executor's fencing. With the stalled check it bounds how long a job of a
   * killed process waits before another worker takes it (about lock + interval).
   */
  lockDurationMs?: number;
  /** How often BullMQ looks for stalled jobs (a dead worker's), ms (default 5 000). */
  stalledIntervalMs?: number;
  /** Pauses the worker and hands jobs back unattempted while Postgres is down (the context's). */
  gate: PostgresGate;
  /**
   * Pauses the worker and hands jobs back unattempted while the ledger marks this release draining
   * (the context's; docs/decisions/0480-drain-held-by-the-ledger.md). Every service passes it.
   */
  drain?: DrainGate;
  /**
   * A service's own reasons to hand a job back unattempted, asked after the Postgres and drain
   * gates, in order (the executor's untrusted delegation key, ADR 0767).
   */
  holds?: readonly JobHold[];
}

/**
 * A reason a worker hands a job back before its handler runs, without consuming an attempt (the
 * way the {@link DrainGate} holds a draining release's jobs).
 */
export interface JobHold {
  /** Whether a job fetched now must go back. Must not reject. */
  holds(): Promise<boolean>;
  /**
   * Puts `job` back as delayed, without consuming an attempt.
   * @throws DelayedError always — the processor lets it propagate (BullMQ's protocol).
   */
  hold(job: Job, token: string | undefined): Promise<never>;
}

/**
 * Called once when a job fails its last attempt (not for a refused payload or a quarantined
 * release, which fail as unrecoverable on purpose), with the validated payload and the last
 * error: the dead letter, where the owning service puts the run in an explicit state.
 */
export type ExhaustedHandler<T> = (payload: T, job: Job, err: Error) => Promise<void>;

/**
 * A job whose handler asked for a move the transition table refuses (docs/product/states.md#transition-table):
 * its transaction rolled back, so nothing was written, and repeating it would ask again. The job
 * ends with the outcome `refused:illegal_transition:<entity>:<from>-><to>` (logged, counted as
 * rejected) instead of failing into retries; the run stays as it was, where the watchdog sees it
 * (docs/decisions/0100, 0150).
 */
function refuseIllegal(base: string, queue: string, job: Job, err: IllegalTransition, log: Logger): string {
  recordJob(base, 'rejected', 0);
  log.warn(
    { queue, jobId: job.id, entity: err.entity, id: err.id, from: err.from, to: err.to, missing: err.missing },
    'illegal transition refused',
  );
  return `refused:illegal_transition:${err.entity}:${err.from}->${err.to}`;
}

/**
 * Starts a BullMQ worker on the release-specific queue of `contract`. Each payload is
 * `safeParse`d: an invalid payload or one carrying another release fails with
 * `UnrecoverableError` (never retried; it stays in the failed set as quarantined). While
 * `opts.gate` finds Postgres down the worker is paused, and a job that meets the outage (before
 * its handler, or as a connection fault out of it) goes back delayed without consuming an attempt,
 * as does one the drain gate or one of `opts.holds` holds. A handler that throws `IllegalTransition` completes refused (see {@link refuseIllegal}). Each
 * job it starts advances its queue's fair clock ({@link attachFairClock}).
 */
export function createWorker<T extends { release: string; traceparent?: string }>(
  contract: QueueContract<T>,
  handler: JobHandler<T>,
  opts: WorkerOptions & { onExhausted?: ExhaustedHandler<T> },
): Worker {
  const name = queueName(contract.base, opts.release);
  consumedQueues.set(name, contract.base);
  const connection = createRedis(opts.redisUrl, opts.log);
  // The drain gate is asked first: a draining release holds every job whatever else would.
  const holds: readonly JobHold[] = [...(opts.drain ? [opts.drain] : []), ...(opts.holds ?? [])];
  const worker = new Worker(
    name,
    async (job: Job, token?: string) => {
      const startedMs = Date.now();
      if (!(await opts.gate.answers())) return opts.gate.defer(job, token, 'postgres down before the job started');
      for (const gate of holds) if (await gate.holds()) return gate.hold(job, token);
      const parsed = contract.schema.safeParse(job.data);
      if (!parsed.success) {
        recordJob(contract.base, 'rejected', 0);
        opts.log.error({ queue: name, jobId: job.id, issues: parsed.error.issues.length }, 'invalid job payload');
        throw new UnrecoverableError(`invalid payload for ${contract.base}`);
      }
      if (parsed.data.release !== opts.release) {
        recordJob(contract.base, 'rejected', 0);
        opts.log.warn({ queue: name, jobId: job.id, jobRelease: parsed.data.release }, 'job of another release quarantined');
        throw new UnrecoverableError(`quarantined: job of release ${parsed.data.release} on ${opts.release} worker`);
      }
      const data = parsed.data;
      // Parented only from the context stored with the job (ADR 0020), never the worker's own.
      // A CONSUMER span in the messaging conventions (ADR 0260): system bullmq, operation process.
      return withJobSpan(`${contract.base} process`, messagingAttributes(name, job.id ?? '', 'process'), data.traceparent, async () => {
        const t0 = performance.now();
        try {
          const result = await handler(data, job);
          recordJob(contract.base, 'completed', performance.now() - t0);
          opts.log.debug({ queue: name, jobId: job.id, attempt: job.attemptsMade + 1 }, 'job processed');
          return result;
        } catch (err) {
          if (isConnectionFault(err)) recordDependencyError('postgres', 'connection');
          if (isConnectionFault(err) && (await opts.gate.shouldDefer(job, startedMs, err))) {
            return opts.gate.defer(job, token, (err as Error).message);
          }
          if (err instanceof IllegalTransition) return refuseIllegal(contract.base, name, job, err, opts.log);
          recordJob(contract.base, 'failed', performance.now() - t0);
          throw err;
        }
      });
    },
    {
      connection,
      prefix: opts.prefix,
      concurrency: opts.concurrency ?? 8,
      lockDuration: opts.lockDurationMs ?? 15_000,
      stalledInterval: opts.stalledIntervalMs ?? 5_000,
      autorun: true,
    },
  );
  worker.on('failed', (job, err) => {
    opts.log.warn({ queue: name, jobId: job?.id, attempts: job?.attemptsMade, err: err.message }, 'job failed');
    // BullMQ counts the attempt before it emits: attemptsMade ≥ attempts means no retry follows.
    const final = job && job.attemptsMade >= (job.opts.attempts ?? 1);
    if (!job || !final || !opts.onExhausted || err.name === 'UnrecoverableError') return;
    const parsed = contract.schema.safeParse(job.data);
    if (!parsed.success) return;
    opts.log.error({ queue: name, jobId: job.id, attempts: job.attemptsMade, err: err.message }, 'job exhausted its attempts');
    opts.onExhausted(parsed.data, job, err).catch((e: unknown) => {
      opts.log.error({ queue: name, jobId: job.id, err: (e as Error).message }, 'dead-letter handling failed');
    });
  });
  // BullMQ emits an error on every failed blocking read while Redis is down: one line per 30 s.
  const throttle = logThrottle();
  worker.on('error', (err) =>
    throttle(err.message, (repeated) => opts.log.error({ queue: name, err: err.message, repeated }, 'worker error')),
  );
  opts.gate.attach(worker);
  opts.drain?.attach(worker);
  attachFairClock(worker, connection, opts.log);
  return worker;
}

/**
 * Starts one worker per consumed queue. Fails at boot if a queue appears twice.
 * @throws Error naming the duplicated queue.
 */
export function startWorkers(
  entries: Array<{
    contract: QueueContract<{ release: string }>;
    handler: JobHandler<never>;
    concurrency?: number;
    onExhausted?: ExhaustedHandler<never>;
  }>,
  opts: WorkerOptions,
): Worker[] {
  const seen = new Set<string>();
  for (const e of entries) {
    if (seen.has(e.contract.base)) throw new Error(`queue ${e.contract.base} has two handlers`);
    seen.add(e.contract.base);
  }
  return entries.map((e) =>
    createWorker(e.contract, e.handler as JobHandler<{ release: string }>, {
      ...opts,
      concurrency: e.concurrency ?? opts.concurrency,
      onExhausted: e.onExhausted as ExhaustedHandler<{ release: string }> | undefined,
    }),
  );
}
