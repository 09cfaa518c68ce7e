import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Redis } from 'ioredis';
import { Worker, type Job } from 'bullmq';
import { SERVICES, startStack, type RunningStack } from '@gatehouse/cli';
import { createDb, LIVE_STATES, migrate, type Db } from '@gatehouse/ledger';
import { dropQueuePrefix, freePort } from '@gatehouse/test-harness';
import { QueueRegistry } from '@gatehouse/platform';
import { jobOptionsFor, queueName, type ResultJob } from '@gatehouse/contracts';
import { COUNT_HOOK, readCounts, type CountSnapshot } from './counters.ts';
import { peakRssMb } from './proc.ts';
import { Waiters } from './driver.ts';
import { nowMs } from './stats.ts';
import { writeBenchWorld, type BenchActor } from './tenants.ts';
import { endSeededRuns, type SeededProposal } from './seed.ts';

/** Postgres server of the benchmarks (same variable as the tests). */
export const PG_SERVER = process.env.TEST_PG_SERVER ?? 'postgres://postgres@127.0.0.1:5432';
/** Redis of the benchmarks. */
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** The release every benchmark job carries (queues `<base>.rel-1`). */
export const RELEASE = 'rel-1';
/** How long a service may take to answer `/readyz` after it starts, ms (`BENCH_READY_TIMEOUT_MS`, default 90 000: a busy shared machine needs more). */
const READY_TIMEOUT_MS = Number(process.env.BENCH_READY_TIMEOUT_MS ?? 90_000);
/** How often the stand-in agent loop ends the runs whose result it took, ms. */
const CLOSE_EVERY_MS = 5_000;
/**
 * How long after its result a run is ended, ms (20–25 s with the timer): well inside the watchdog's 120 s bound. A
 * duplicate delivery that arrives later (the replay) meets an ended run, which changes nothing: a redelivery of a
 * finished operation is answered from the operation before any check of the run's state (ADR 0350).
 */
const CLOSE_AFTER_MS = 20_000;
/** Local secret user tokens are signed with (the services' default in local mode). */
export const AUTH_SECRET = 'local-auth-secret-change-me';

/** A result job as the bench's stand-in for the agent loop received it. */
export interface ReceivedResult {
  /** `performance.now()` when the job reached the consumer, ms. */
  atMs: number;
  job: Job<ResultJob>;
}

async function admin(statement: string): Promise<void> {
  const c = new pg.Client({ connectionString: `${PG_SERVER}/postgres` });
  await c.connect();
  try {
    await c.query(statement);
  } finally {
    await c.end();
  }
}

/** A database of its own (`gh_bench_<hex>`), migrated; `drop()` removes it whatever is connected. */
export async function createBenchDatabase(tag = ''): Promise<{ name: string; url: string; db: Db; drop: () => Promise<void> }> {
  const name = `gh_bench_${tag}${randomBytes(5).toString('hex')}`;
  await admin(`CREATE DATABASE ${name}`);
  const url = `${PG_SERVER}/${name}`;
  const k = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }) });
  try {
    await migrate(k);
  } finally {
    await k.destroy();
  }
  const db = createDb(url, 20);
  return {
    name,
    url,
    db,
    drop: async () => {
      await db.destroy();
      await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

/**
 * One benchmark run's world: its own database and Redis key prefix, the Gatehouse services as
 * processes (with the round-trip counting hook preloaded), any extra executor processes, and a
 * consumer of the `results` queue standing in for the agent loop. `close()` stops every process
 * it started, drops the prefix and the database, and removes its temporary folder.
 */
export class BenchWorld {
  readonly dir: string;
  readonly countersDir: string;
  readonly prefix = `ghbench-${randomBytes(5).toString('hex')}`;
  readonly redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  readonly queues = new QueueRegistry(this.redis, this.prefix);
  /** Results received by the stand-in consumer, keyed `<workflowId>/<callId>`. */
  readonly results = new Waiters<ReceivedResult>();
  /** Highest peak RSS seen per service, MB. */
  readonly peakRss: Record<string, number> = {};
  env: Record<string, string> = {};
  /** The (tenant, rep) pairs of the benchmark world: rep-ana of quillfeather, then one rep per bench tenant. */
  readonly actors: BenchActor[];
  readonly #worldPath: string;
  database: Awaited<ReturnType<typeof createBenchDatabase>> | undefined;
  readonly #services = new Map<string, RunningStack>();
  readonly #starting: Array<Promise<RunningStack>> = [];
  readonly #extraExecutors: RunningStack[] = [];
  #resultsWorker: Worker | undefined;
  #resultsConnection: Redis | undefined;
  /** Runs whose result the stand-in took, with when (ms), not yet ended ({@link endSeededRuns}). */
  #settled: Array<{ workflowId: string; atMs: number }> = [];
  #closer: NodeJS.Timeout | undefined;
  #closing: Promise<void> = Promise.resolve();
  #closed = false;

  constructor() {
    this.dir = mkdtempSync(resolve(tmpdir(), 'gh-bench-'));
    this.countersDir = resolve(this.dir, 'counters');
    mkdirSync(this.countersDir);
    const world = writeBenchWorld(this.dir);
    this.actors = world.actors;
    this.#worldPath = world.path;
  }

  get db(): Db {
    if (!this.database) throw new Error('world not started');
    return this.database.db;
  }

  /**
   * Creates the database and starts `services` (names of `SERVICES`) as processes, all at once
   * (none needs another to boot: staging creates its schema itself, the others meet at runtime).
   */
  async start(services: string[]): Promise<void> {
    this.database = await createBenchDatabase();
    const env: Record<string, string> = {
      DATABASE_URL: this.database.url,
      REDIS_URL,
      QUEUE_PREFIX: this.prefix,
      GATEHOUSE_RELEASE: RELEASE,
      GATEHOUSE_ENV: 'local',
      // The synthetic world plus the benchmark tenants (bench/lib/tenants.ts).
      GATEHOUSE_WORLD: this.#worldPath,
      // The load is one user of one tenant at machine speed: lift the per-person abuse limits.
      INTAKE_RATE_PER_USER: '1000000',
      INTAKE_RATE_PER_TENANT: '1000000',
      SIGNIN_RATE_PER_USER: '1000000',
      SIGNIN_RATE_PER_TENANT: '1000000',
      LOG_LEVEL: 'warn',
      AUDIT_SIGNING_KEY_PATH: resolve(this.dir, 'audit-key.pem'),
      // One delegation key pair for every service started apart (created by the first startStack).
      GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: resolve(this.dir, 'delegation-ed25519.pem'),
      GATEHOUSE_DELEGATION_JWKS_PATH: resolve(this.dir, 'delegation-jwks.json'),
      NODE_OPTIONS: `--import=${COUNT_HOOK} ${process.env.BENCH_NODE_OPTIONS ?? ''}`.trim(),
      BENCH_COUNTERS_DIR: this.countersDir,
    };
    for (const svc of SERVICES) env[svc.portVar] = String(await freePort());
    env.STAGING_URL = `http://127.0.0.1:${env.STAGING_PORT}`;
    env.MODEL_BASE_URL = `http://127.0.0.1:${env.MODEL_STUB_PORT}/v1`;
    this.env = env;
    await Promise.all(services.map((s) => this.startService(s)));
  }

  /** Base URL of a running service. */
  url(service: string): string {
    const port = this.#services.get(service)?.ports[service];
    if (!port) throw new Error(`${service} is not running`);
    return `http://127.0.0.1:${port}`;
  }

  /** Starts one service of `SERVICES` as a process (logs in `<dir>/<service>/`). */
  async startService(name: string): Promise<void> {
    if (this.#services.has(name)) return;
    const stack = startStack({ env: this.env, dir: resolve(this.dir, name), only: [name], readyTimeoutMs: READY_TIMEOUT_MS });
    this.#starting.push(stack);
    this.#services.set(name, await stack);
  }

  /**
   * Restarts every service started with {@link start} (not extra executors) with `env` merged
   * into its environment (`undefined` removes a variable), all at once, and waits until each is ready.
   */
  async restartAll(env: Record<string, string | undefined>): Promise<void> {
    this.notePeakRss();
    await Promise.all(
      [...this.#services].map(async ([name, stack]) => {
        await stack.restart(name, env);
        await stack.ready(name, READY_TIMEOUT_MS);
      }),
    );
  }

  /** Process id → service name of every running service process (executors `executor`). */
  pids(): Map<number, string> {
    const out = new Map<number, string>();
    for (const [name, s] of this.#services) {
      const child = s.processes.get(name);
      if (child?.pid && child.exitCode === null) out.set(child.pid, name);
    }
    for (const s of this.#extraExecutors) {
      const child = s.processes.get('executor');
      if (child?.pid && child.exitCode === null) out.set(child.pid, 'executor');
    }
    return out;
  }

  /** Executor processes running now. */
  get executorCount(): number {
    return [...this.pids().values()].filter((n) => n === 'executor').length;
  }

  /** Starts or stops extra executor processes until `n` executors run (the stack's one included). */
  async setExecutors(n: number): Promise<void> {
    this.notePeakRss();
    while (this.executorCount < n) {
      const env = { ...this.env, EXECUTOR_PORT: String(await freePort()) };
      const dir = resolve(this.dir, `executor-${this.#extraExecutors.length + 2}`);
      this.#extraExecutors.push(await startStack({ env, dir, only: ['executor'], readyTimeoutMs: READY_TIMEOUT_MS }));
    }
    while (this.executorCount > n && this.#extraExecutors.length) await this.#extraExecutors.pop()!.stop(10_000);
  }

  /** Round-trip counters of every service process so far (see `count-hook.ts`). */
  counts(settleMs?: number): Promise<CountSnapshot> {
    return readCounts(this.countersDir, this.pids(), settleMs);
  }

  /** Records the current peak RSS (VmHWM) of every service process into {@link peakRss}. */
  notePeakRss(): void {
    for (const [pid, name] of this.pids()) {
      const mb = peakRssMb(pid);
      if (mb !== null) this.peakRss[name] = Math.max(this.peakRss[name] ?? 0, mb);
    }
    const own = peakRssMb(process.pid);
    if (own !== null) this.peakRss.bench = Math.max(this.peakRss.bench ?? 0, own);
  }

  /** Runs still live (any state the watchdog watches) in the benchmark's database now. */
  async liveRuns(): Promise<number> {
    const r = await this.db
      .selectFrom('workflows')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('state', 'in', [...LIVE_STATES])
      .executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  /** How many runs the executor's watchdog re-drove so far (`run.redriven` audit events, chained or not). */
  async redrives(): Promise<number> {
    const r = await sql<{ n: string }>`SELECT
      (SELECT count(*) FROM audit_outbox WHERE event->>'type' = 'run.redriven') +
      (SELECT count(*) FROM audit_log WHERE event->>'type' = 'run.redriven') AS n`.execute(this.db);
    return Number(r.rows[0]?.n ?? 0);
  }

  /** Ends the settled runs taken at or before `untilMs` (one statement, after the previous one). */
  #closeSettled(untilMs: number): void {
    const due = this.#settled.filter((r) => r.atMs <= untilMs).map((r) => r.workflowId);
    if (!due.length || !this.database) return;
    this.#settled = this.#settled.filter((r) => r.atMs > untilMs);
    const db = this.database.db;
    this.#closing = this.#closing
      .then(() => endSeededRuns(db, due))
      .catch((err: unknown) => console.error(`bench: could not end ${due.length} settled runs: ${(err as Error).message}`));
  }

  /**
   * Puts seeded proposal `c` on `proposals.rel-1` as the agent loop's outbox relay does (with its
   * tenant's fair priority when `fairKey` is given, plain FIFO without) and resolves with its
   * result as the stand-in consumer took it. The wait starts after the add: a result that comes
   * first is kept for it, and a failed add leaves no timer behind.
   * @throws what the add throws (Redis unavailable), or after `timeoutMs` without a result.
   */
  async propose(c: SeededProposal, timeoutMs: number, fairKey?: string): Promise<ReceivedResult> {
    const name = queueName('proposals', RELEASE);
    const payload = { release: RELEASE, workflowId: c.workflowId, proposalId: c.proposalId, callId: c.callId };
    await this.queues.add(name, 'proposal', payload, { ...jobOptionsFor(name), jobId: `proposal_${c.proposalId}` }, fairKey);
    return this.results.wait(`${c.workflowId}/${c.callId}`, timeoutMs);
  }

  /**
   * Starts the stand-in agent loop: a worker on `results.rel-1` that settles {@link results}
   * and, like the agent loop, ends each run once its result is in ({@link endSeededRuns}):
   * every {@link CLOSE_EVERY_MS}, the runs settled at least {@link CLOSE_AFTER_MS} before, so a
   * duplicate delivery still in flight (the replay section) meets the run as the first did.
   */
  startResultsConsumer(): void {
    if (this.#resultsWorker) return;
    this.#closer = setInterval(() => this.#closeSettled(nowMs() - CLOSE_AFTER_MS), CLOSE_EVERY_MS);
    this.#resultsConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    this.#resultsWorker = new Worker(
      queueName('results', RELEASE),
      async (job: Job<ResultJob>) => {
        const atMs = nowMs();
        this.results.settle(`${job.data.workflowId}/${job.data.callId}`, { atMs, job });
        this.#settled.push({ workflowId: job.data.workflowId, atMs });
        return 'received';
      },
      { connection: this.#resultsConnection, prefix: this.prefix, concurrency: 200 },
    );
  }

  /** Stops the stand-in consumer (before the real agent loop takes the queue over). */
  async stopResultsConsumer(): Promise<void> {
    clearInterval(this.#closer);
    await this.#resultsWorker?.close();
    this.#closeSettled(Number.POSITIVE_INFINITY);
    await this.#closing;
    this.#resultsConnection?.disconnect();
    this.#resultsWorker = undefined;
    this.#resultsConnection = undefined;
  }

  /**
   * Stops every process (extra executors, then the stack), the consumer and the queues, drops
   * the Redis prefix and the database, and removes the temporary folder (kept with
   * `keepLogs`, e.g. after a failure, and its path returned).
   */
  async close(opts: { keepLogs?: boolean } = {}): Promise<string | null> {
    if (this.#closed) return null;
    this.#closed = true;
    this.notePeakRss();
    await this.stopResultsConsumer().catch(() => {});
    for (const s of this.#extraExecutors.splice(0)) await s.stop(10_000).catch(() => {});
    // Services still booting when something failed are awaited, so none is left behind. The
    // workers stop before the systems they call (staging, model-stub), so nothing in flight
    // is cut off mid-call.
    await Promise.all(this.#starting.map((p) => p.catch(() => null)));
    const order = ['agent-loop', 'executor', 'policy-gateway', 'approval', 'audit', 'staging', 'model-stub'];
    const names = [...this.#services.keys()].sort((a, b) => order.indexOf(a) - order.indexOf(b));
    for (const name of names)
      await this.#services
        .get(name)!
        .stop(10_000)
        .catch(() => {});
    await this.queues.close().catch(() => {});
    this.redis.disconnect();
    await dropQueuePrefix(REDIS_URL, this.prefix).catch(() => {});
    await this.database?.drop().catch(() => {});
    if (opts.keepLogs) return this.dir;
    rmSync(this.dir, { recursive: true, force: true });
    return null;
  }
}
