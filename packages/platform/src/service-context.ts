import type { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { z, ZodObject, ZodRawShape } from 'zod';
import { createDb, type Db } from '@gatehouse/ledger';
import { loadWorld } from '@gatehouse/contracts';
import { parseEnv, type BaseEnv } from './env.ts';
import { createLogger, type Logger } from './logger.ts';
import { createRedis, QueueRegistry, readQueueDepth } from './queues.ts';
import { OutboxRelay } from './outbox-relay.ts';
import { PostgresGate } from './postgres-gate.ts';
import { DrainGate } from './drain-gate.ts';
import { schemaReadyCheck } from './release-check.ts';
import { dependencyRoutes, observeDependencyErrors, observeQueueDepth, recordDependencyError, startTelemetry } from '@gatehouse/telemetry';

/** The model-stub's Responses API on its default port, and the real API: the agent loop's defaults. */
const LOCAL_MODEL_URL = 'http://127.0.0.1:7103/v1';
const OPENAI_API_URL = 'https://api.openai.com/v1';

/** What every service process holds: its env, logger, ledger pool, queues and outbox relay. */
export interface ServiceContext<E> {
  name: string;
  env: E;
  log: Logger;
  db: Db;
  redis: Redis;
  queues: QueueRegistry;
  relay: OutboxRelay;
  /** Whether Postgres answers; pass to every worker (pauses them during an outage). */
  gate: PostgresGate;
  /** Whether the ledger marks this release draining; pass to every worker (holds them while it does). */
  drain: DrainGate;
  /**
   * Readiness checks for `/readyz`: Postgres and Redis answer, and the database holds every
   * migration of this code (`schema`, answered from a 5 s cache: {@link schemaReadyCheck}).
   */
  readyChecks: Record<string, () => Promise<void>>;
  /** Closes workers, relay, queues, Redis and the pool (in that order). */
  close: (workers?: Worker[]) => Promise<void>;
}

/**
 * Builds the context of one service from the environment (base settings plus `extra`) and
 * starts its telemetry (traces, metrics — including the depth of the queues its workers
 * consume and the errors of its dependencies — and the log correlation).
 * @param productionChecks this service's own reasons to refuse production, added to the base ones.
 * @throws Error listing every invalid environment variable (in production, every problem).
 * @throws Error when the directory (`GATEHOUSE_WORLD`, else the shipped world) is missing or invalid (`loadWorld`).
 */
export function createServiceContext<S extends ZodRawShape>(
  name: string,
  extra: S,
  source: Record<string, string | undefined> = process.env,
  productionChecks?: (env: BaseEnv & z.output<ZodObject<S>>) => string[],
): ServiceContext<BaseEnv & z.output<ZodObject<S>>> {
  const env = parseEnv(extra, source, productionChecks);
  // The directory is read and checked before anything starts: one that cannot load (a user id in
  // two tenants, ADR 0766) stops the service here rather than failing its requests later.
  loadWorld(source.GATEHOUSE_WORLD);
  const telemetry = startTelemetry(name, env.GATEHOUSE_RELEASE);
  const log = createLogger(name);
  // A client that loses its connection fails its statement; the process goes on (see createDb).
  // A session idle inside a transaction is ended by Postgres: a stopped replica releases its locks (ADR 0748).
  // A wait for a pool connection is bounded: a starved pool fails a checkout, never hangs (ADR 0787).
  const db = createDb(
    env.DATABASE_URL,
    10,
    (err) => {
      log.warn({ err: err.message }, 'postgres client lost its connection');
      recordDependencyError('postgres', 'connection_lost');
      gate.noteClientFault();
    },
    { idleInTransactionTimeoutMs: env.POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS, connectTimeoutMs: env.POSTGRES_POOL_ACQUIRE_TIMEOUT_MS },
  );
  const gate = new PostgresGate(db, log);
  const drain = new DrainGate(db, env.GATEHOUSE_RELEASE, log, { postgres: gate });
  void drain.start();
  const redis = createRedis(env.REDIS_URL, log);
  const queues = new QueueRegistry(redis, env.QUEUE_PREFIX, log);
  const relay = new OutboxRelay(db, queues, log);
  observeQueueDepth(() => readQueueDepth(queues));
  // Failed requests to the systems of record and the model (the stub's and the real API's URLs too).
  observeDependencyErrors(dependencyRoutes(env.STAGING_URL, [env.MODEL_BASE_URL, LOCAL_MODEL_URL, OPENAI_API_URL]));
  return {
    name,
    env,
    log,
    db,
    redis,
    queues,
    relay,
    gate,
    drain,
    readyChecks: {
      postgres: gate.readyCheck,
      schema: schemaReadyCheck(db, { postgres: gate }),
      redis: redisReadyCheck(redis),
    },
    close: async (workers = []) => {
      gate.close();
      drain.close();
      await Promise.all(workers.map((w) => w.close()));
      await relay.stop();
      await queues.close();
      redis.disconnect();
      await db.destroy();
      await telemetry.shutdown();
    },
  };
}

/**
 * `/readyz`'s Redis check: fails at once while the connection is not ready (commands would queue,
 * retried, never dropped), else sends one PING and fails unless it answers PONG. Probes that come
 * while a PING is unanswered (a frozen Redis still accepting TCP) wait for that PING rather than
 * send another, so a hung Redis does not collect a command per probe.
 * @throws Error naming the connection's status, or what the PING answered.
 */
export function redisReadyCheck(redis: Redis): () => Promise<void> {
  let pinging: Promise<string> | undefined;
  return async () => {
    if (redis.status !== 'ready') throw new Error(`redis connection is ${redis.status}`);
    pinging ??= redis.ping().finally(() => {
      pinging = undefined;
    });
    if ((await pinging) !== 'PONG') throw new Error('redis did not answer PONG');
  };
}
