import { Queue, Worker, UnrecoverableError, type Job, type ConnectionOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { queueName, type QueueContract } from '@gatehouse/contracts';
import { withSpan } from '@gatehouse/telemetry';
import type { Logger } from './logger.ts';

/** Opens an ioredis connection suitable for BullMQ workers (`maxRetriesPerRequest: null`). */
export function createRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true });
}

/**
 * Caches one BullMQ `Queue` per queue name, sharing one connection and key prefix.
 * Close with {@link QueueRegistry.close}.
 */
export class QueueRegistry {
  readonly connection: ConnectionOptions;
  readonly prefix: string;
  readonly #queues = new Map<string, Queue>();

  constructor(connection: Redis, prefix: string) {
    this.connection = connection;
    this.prefix = prefix;
  }

  /** The queue called `name` (e.g. `executions.rel-1`). */
  get(name: string): Queue {
    let q = this.#queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.connection, prefix: this.prefix });
      this.#queues.set(name, q);
    }
    return q;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#queues.values()].map((q) => q.close()));
    this.#queues.clear();
  }
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
  /** BullMQ lock duration in ms (default 30 000); not a lease — see the executor's fencing. */
  lockDurationMs?: number;
  /** How often BullMQ looks for stalled jobs (a dead worker's), ms (default 30 000). */
  stalledIntervalMs?: number;
}

/**
 * Starts a BullMQ worker on the release-specific queue of `contract`. Each payload is
 * `safeParse`d: an invalid payload or one carrying another release fails with
 * `UnrecoverableError` (never retried; it stays in the failed set as quarantined).
 */
export function createWorker<T extends { release: string; traceparent?: string }>(
  contract: QueueContract<T>,
  handler: JobHandler<T>,
  opts: WorkerOptions,
): Worker {
  const name = queueName(contract.base, opts.release);
  const worker = new Worker(
    name,
    async (job: Job) => {
      const parsed = contract.schema.safeParse(job.data);
      if (!parsed.success) {
        opts.log.error({ queue: name, jobId: job.id, issues: parsed.error.issues.length }, 'invalid job payload');
        throw new UnrecoverableError(`invalid payload for ${contract.base}`);
      }
      if (parsed.data.release !== opts.release) {
        opts.log.warn({ queue: name, jobId: job.id, jobRelease: parsed.data.release }, 'job of another release quarantined');
        throw new UnrecoverableError(`quarantined: job of release ${parsed.data.release} on ${opts.release} worker`);
      }
      const data = parsed.data;
      return withSpan(
        `${contract.base} process`,
        { 'messaging.destination.name': name, 'messaging.message.id': job.id ?? '' },
        () => handler(data, job),
        data.traceparent,
      );
    },
    {
      connection: createRedis(opts.redisUrl),
      prefix: opts.prefix,
      concurrency: opts.concurrency ?? 8,
      lockDuration: opts.lockDurationMs ?? 30_000,
      stalledInterval: opts.stalledIntervalMs ?? 30_000,
      autorun: true,
    },
  );
  worker.on('failed', (job, err) => {
    opts.log.warn({ queue: name, jobId: job?.id, attempts: job?.attemptsMade, err: err.message }, 'job failed');
  });
  worker.on('error', (err) => opts.log.error({ queue: name, err: err.message }, 'worker error'));
  return worker;
}

/**
 * Starts one worker per consumed queue. Fails at boot if a queue appears twice.
 * @throws Error naming the duplicated queue.
 */
export function startWorkers(
  entries: Array<{ contract: QueueContract<{ release: string }>; handler: JobHandler<never>; concurrency?: number }>,
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
    }),
  );
}
