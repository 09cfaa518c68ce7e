import type { Job } from 'bullmq';
import { AS_A_NEW_TICKET, ConflictError, loadReleaseManifest, queueContracts, queueName, redisGlobEscape } from '@gatehouse/contracts';
import {
  actorHash,
  creditDrainWait,
  DependencyUnavailable,
  inTransaction,
  LIVE_STATES,
  recordAudit,
  stopRun,
  type DB,
  type Db,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import { Redis } from 'ioredis';
import { sql, type ExpressionBuilder } from 'kysely';
import { dependencyCheckHint, hostOf, OutboxRelay, QueueRegistry, within, type BaseEnv, type Logger } from '@gatehouse/platform';
import { OpsUsageError } from './ops.ts';

/** How long a CLI command waits for Redis before it gives up, ms (connect, then each of 3 reconnects). */
const CLI_REDIS_CONNECT_MS = 3000;

/**
 * How long a CLI command waits for Redis to answer, ms: the connection's handshake (its ready
 * check) and each command. A Redis that accepts the connection and never answers (SIGSTOPped,
 * wedged) is otherwise waited for without end: the connect bound covers only the TCP handshake.
 */
export const CLI_REDIS_ANSWER_MS = 10_000;

/**
 * Runs `fn` with a Redis connection on `redisUrl` and closes it after (the CLI's commands are
 * short-lived processes). Redis is connected first and given up after a few reconnects (each
 * attempt {@link CLI_REDIS_CONNECT_MS}), and it must answer the handshake and every command within
 * {@link CLI_REDIS_ANSWER_MS}, so an unreachable or hung Redis ends the command instead of
 * hanging it (a service's connection retries for ever; a person at a terminal should not wait
 * for ever). `close` (optional) runs before the connection ends, its errors ignored.
 * @throws DependencyUnavailable(`redis`) naming the server and how to check it, when Redis does
 *   not answer, before or during `fn` (CLI exit 4).
 */
export async function withRedis<T>(redisUrl: string, fn: (redis: Redis) => Promise<T>, close?: () => Promise<unknown>): Promise<T> {
  const redis = new Redis(redisUrl, {
    maxRetriesPerRequest: null,
    lazyConnect: true,
    connectTimeout: CLI_REDIS_CONNECT_MS,
    commandTimeout: CLI_REDIS_ANSWER_MS,
    retryStrategy: (attempt) => (attempt > 3 ? null : 200 * attempt),
  });
  let lastError = '';
  // Reported once, by the command's own failure below (no unhandled error event on the terminal).
  redis.on('error', (err: Error) => void (lastError = err.message));
  const unreachable = (err: unknown) =>
    new DependencyUnavailable(
      'redis',
      `Redis (${hostOf(redisUrl)}) is unreachable or not answering (${lastError || (err as Error).message}); ` +
        `${dependencyCheckHint('redis', redisUrl)}, then run the command again`,
      { cause: err },
    );
  try {
    await within(redis.connect(), CLI_REDIS_ANSWER_MS);
  } catch (err) {
    redis.disconnect();
    throw unreachable(err);
  }
  try {
    return await fn(redis);
  } catch (err) {
    throw redis.status === 'end' || (err as Error).message === 'Command timed out' ? unreachable(err) : err;
  } finally {
    await close?.().catch(() => undefined);
    redis.disconnect();
  }
}

/** What a CLI command prints when {@link publishFromCli} left its rows in the outbox. */
export const LEFT_IN_OUTBOX =
  'Redis did not take the re-enqueued jobs now: they wait in the outbox, and the services publish them once Redis answers';

/**
 * Publishes outbox `rows` a CLI command has just committed, for a command whose ledger write is
 * the whole change (a tool switch, a re-enable stage): containment must work while Redis is down.
 * Redis is tried as {@link withQueues} tries it; when it does not answer, or a row was not
 * published and marked (a slow or failing Redis: the relay logs and leaves it), the rows stay in
 * the outbox, whose sweep in every running service publishes them once it can (ADR 0650).
 * @returns `published` (or nothing to publish) when every row is marked published, else `left_in_outbox`.
 * @throws what the ledger throws while reading the marks.
 */
export async function publishFromCli(
  env: Pick<BaseEnv, 'REDIS_URL' | 'QUEUE_PREFIX'>,
  db: Db,
  rows: OutboxRow[],
  log: Logger,
): Promise<'published' | 'left_in_outbox'> {
  if (!rows.length) return 'published';
  try {
    await withQueues(env, (queues) => new OutboxRelay(db, queues, log).publishAndMark(rows));
  } catch (err) {
    if (err instanceof DependencyUnavailable) return 'left_in_outbox';
    throw err;
  }
  const waiting = await db
    .selectFrom('outbox')
    .select('id')
    .where(
      'id',
      'in',
      rows.map((r) => r.id),
    )
    .where('published_at', 'is', null)
    .execute();
  return waiting.length ? 'left_in_outbox' : 'published';
}

/**
 * Runs `fn` with a queue registry on the configured Redis and key prefix ({@link withRedis}: an
 * unreachable Redis ends the command), and closes both after.
 * @throws DependencyUnavailable(`redis`) when Redis does not answer, before or during `fn` (CLI exit 4).
 */
export async function withQueues<T>(
  env: Pick<BaseEnv, 'REDIS_URL' | 'QUEUE_PREFIX'>,
  fn: (queues: QueueRegistry) => Promise<T>,
): Promise<T> {
  let queues: QueueRegistry | undefined;
  return withRedis(
    env.REDIS_URL,
    (redis) => {
      queues = new QueueRegistry(redis, env.QUEUE_PREFIX);
      return fn(queues);
    },
    async () => queues?.close(),
  );
}

/**
 * Deletes every key under `prefix` (`<prefix>:*`, the prefix matched literally) with SCAN and
 * UNLINK in batches of about `batch` keys, so a large keyspace never blocks Redis the way KEYS
 * would. Returns how many keys were deleted.
 */
export async function dropKeysUnder(redis: Redis, prefix: string, batch = 1000): Promise<number> {
  let cursor = '0';
  let dropped = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${redisGlobEscape(prefix)}:*`, 'COUNT', batch);
    cursor = next;
    if (keys.length) dropped += await redis.unlink(...keys);
  } while (cursor !== '0');
  return dropped;
}

/** Job states that are queued but not running: what requeue and quarantine move. */
const QUEUED_STATES = ['waiting', 'paused', 'delayed', 'prioritized', 'waiting-children'] as const;

/** Who runs an ops command (the verified operator) and the audit HMAC key. */
interface OpsActor {
  operator: string;
  hmacKey: string;
}

/** The queues of one release: `<base>.<release>` for every queue contract. */
export function releaseQueueNames(release: string): Array<{ base: keyof typeof queueContracts; name: string }> {
  return (Object.keys(queueContracts) as Array<keyof typeof queueContracts>).map((base) => ({ base, name: queueName(base, release) }));
}

/**
 * Every queued (not running) job of `release`'s queues that belongs to a run, with its queue's
 * base name. The next job of a job scheduler (the executor's `reconcile-every`) is no run's work
 * and BullMQ refuses to remove it by itself: it is left to its scheduler, never moved or quarantined.
 */
export async function queuedJobs(queues: QueueRegistry, release: string): Promise<Array<{ base: keyof typeof queueContracts; job: Job }>> {
  const out: Array<{ base: keyof typeof queueContracts; job: Job }> = [];
  for (const q of releaseQueueNames(release)) {
    for (const job of await queues.get(q.name).getJobs([...QUEUED_STATES])) if (job && !job.repeatJobKey) out.push({ base: q.base, job });
  }
  return out;
}

/** @throws Error when `release` is not in the ledger's releases (a typo must not report success). */
async function assertRegistered(db: Db, release: string): Promise<{ status: string; draining: boolean }> {
  const r = await db.selectFrom('releases').select(['status', 'draining']).where('id', '=', release).executeTakeFirst();
  if (!r) throw new Error(`release ${release} is not registered`);
  return r;
}

/**
 * Thrown when a queue operation would move or set aside the work of a release whose workers still
 * take it, or would send jobs where no worker runs them (docs/runbooks/rollback.md step 2).
 */
export class QueueOpRefused extends ConflictError {
  constructor(message: string) {
    super('queue_op_refused', message);
  }
}

/**
 * The source of a requeue or a quarantine must be draining (a rollback drains the releases it
 * rolls back; `gatehouse queues drain` drains one by hand): only then no worker claims its jobs
 * while they are moved, and no live ticket of the serving release is stopped by a mistyped id.
 * @throws Error when `release` is not registered; QueueOpRefused when it is not draining.
 */
async function assertDraining(db: Db, release: string, command: string): Promise<void> {
  const r = await assertRegistered(db, release);
  if (!r.draining) {
    throw new QueueOpRefused(
      `release ${release} is ${r.status} and not draining: its workers still take its jobs, so ${command} would race them ` +
        `(and stop its live runs). Roll it back, or drain it first: gatehouse queues drain --release ${release}`,
    );
  }
}

/** The audited queue operations, as their audit event types. */
type QueueOpsEvent = 'queues.drained' | 'queues.resumed' | 'queues.quarantined' | 'queues.requeued';

/** Records one queue operation in the audit chain, inside the transaction that made it: who, what, on which release. */
async function recordQueueOps(trx: Trx, type: QueueOpsEvent, actor: OpsActor, outcome: string, release: string): Promise<void> {
  await recordAudit(trx, {
    type,
    service: 'cli',
    runId: null,
    actorHash: actorHash(actor.hmacKey, actor.operator),
    outcome,
    revisions: { release },
  });
}

/**
 * `gatehouse queues drain --release R`: pauses every queue of R in Redis, so no worker of any
 * process claims another of its jobs, while jobs already running finish or their lease expires;
 * marks the release draining. The mark is what lasts: every worker's drain gate holds R's jobs
 * while it is set, also after a Redis that restarted empty forgot the pause
 * (docs/decisions/0480-drain-held-by-the-ledger.md). Audited. Returns the queues paused.
 * Undone by {@link resumeRelease}.
 * @throws Error when R is not registered.
 */
export async function drainRelease(db: Db, queues: QueueRegistry, release: string, actor: OpsActor): Promise<string[]> {
  await assertRegistered(db, release);
  const names = await pauseReleaseQueues(queues, release);
  await inTransaction(db, async (trx) => {
    // A repeated drain keeps the first one's start: the hold began then (ADR 0699).
    await trx
      .updateTable('releases')
      .set({ draining: true, draining_since: sql`coalesce(draining_since, now())` })
      .where('id', '=', release)
      .execute();
    await recordQueueOps(trx, 'queues.drained', actor, `paused:${names.length}`, release);
  });
  return names;
}

/**
 * `gatehouse queues resume --release R`: undoes {@link drainRelease} — clears R's draining mark in
 * the ledger (the workers' drain gates let its jobs through again within a poll) and resumes R's
 * queues in Redis. Audited `queues.resumed`, with whether R was draining. Returns the queues resumed.
 * @throws Error when R is not registered.
 */
export async function resumeRelease(db: Db, queues: QueueRegistry, release: string, actor: OpsActor): Promise<string[]> {
  await assertRegistered(db, release);
  await inTransaction(db, async (trx) => {
    const was = await trx.selectFrom('releases').select('draining').where('id', '=', release).forUpdate().executeTakeFirst();
    // The held runs' wait was on-call's, not their work: credited before the gates let them go (ADR 0699).
    await creditDrainWait(trx, release);
    await trx.updateTable('releases').set({ draining: false, draining_since: null }).where('id', '=', release).execute();
    await recordQueueOps(trx, 'queues.resumed', actor, was?.draining ? 'was_draining' : 'was_not_draining', release);
  });
  return resumeReleaseQueues(queues, release);
}

/** Pauses every queue of `release` in Redis (no new claims; in-flight jobs finish). Returns the queues paused. */
export async function pauseReleaseQueues(queues: QueueRegistry, release: string): Promise<string[]> {
  const names = releaseQueueNames(release).map((q) => q.name);
  for (const name of names) await queues.get(name).pause();
  return names;
}

/**
 * Resumes every queue of `release` that a drain paused (the release a rollback restores may have
 * been drained by an earlier rollback away from it). Returns the queues resumed.
 */
export async function resumeReleaseQueues(queues: QueueRegistry, release: string): Promise<string[]> {
  const names = releaseQueueNames(release).map((q) => q.name);
  for (const name of names) await queues.get(name).resume();
  return names;
}

/** What {@link quarantineRelease} did: the jobs it set aside, and the runs it stopped. */
export interface QuarantineReport {
  /** Queued jobs of R recorded in `quarantined_jobs` and removed from their queues. */
  jobs: number;
  /** Live runs of R moved to `stopped(quarantined)`. */
  runs: number;
}

/**
 * `gatehouse queues quarantine --release R`: moves every queued job of R into the ledger's
 * `quarantined_jobs` (payload kept, never run) and removes it from its queue, and stops every
 * live run still on R with `stopped(quarantined)` and a next step — chosen from the ledger, not
 * from what Redis holds: a run waiting on a person, paused on a held step, whose job is running
 * or whose job a Redis restarted empty lost is R's too (docs/decisions/0711). A run a requeue
 * moved elsewhere goes on there. Running jobs are left to finish; their actions keep what they
 * claimed. Audited. Returns the jobs set aside and the runs stopped.
 * @throws Error when R is not registered; QueueOpRefused when R is not draining (the serving
 *   release's live runs are never stopped by this command alone).
 */
export async function quarantineRelease(db: Db, queues: QueueRegistry, release: string, actor: OpsActor): Promise<QuarantineReport> {
  await assertDraining(db, release, 'quarantine');
  const jobs = await queuedJobs(queues, release);
  const runs = await inTransaction(db, async (trx) => {
    for (const { job } of jobs) {
      const data = job.data as Record<string, unknown>;
      const workflowId = typeof data.workflowId === 'string' ? data.workflowId : null;
      await trx
        .insertInto('quarantined_jobs')
        .values({
          queue: job.queueName,
          job_id: String(job.id),
          release_id: release,
          workflow_id: workflowId,
          payload: JSON.stringify(data),
          reason: 'quarantined by on-call',
          quarantined_by: actor.operator,
        })
        .onConflict((oc) => oc.columns(['queue', 'job_id']).doNothing())
        .execute();
    }
    let stopped = 0;
    // In id order: every writer locks workflows in id order, so two quarantines never deadlock.
    for (const id of await liveRunsOn(trx, release)) {
      const nextStep = `On-call quarantined the queued work of release ${release} (gatehouse queues quarantine); resubmit it ${AS_A_NEW_TICKET}.`;
      if (await stopRun(trx, { id }, 'quarantined', nextStep, 'ops', { onlyFrom: LIVE_STATES })) stopped++;
    }
    await recordQueueOps(trx, 'queues.quarantined', actor, `jobs:${jobs.length};workflows:${stopped}`, release);
    return stopped;
  });
  // Removed only after the ledger holds them: a crash in between leaves a job both quarantined
  // (recorded) and queued on a paused queue — never lost.
  for (const { job } of jobs) await job.remove();
  // Their tenants' fair tags went with them: the release's next jobs start at each queue's clock.
  for (const q of releaseQueueNames(release)) await queues.forgetFairTags(q.name);
  return { jobs: jobs.length, runs };
}

/**
 * The live runs on `release` in the ledger, in id order. A job left queued on a drained release
 * after its run was requeued elsewhere (the next job of a job that was running during the
 * requeue) is set aside by a quarantine, but its run lives on where it was moved (ADR 0673), so
 * it is not among them.
 */
async function liveRunsOn(trx: Trx, release: string): Promise<string[]> {
  const rows = await trx
    .selectFrom('workflows')
    .select('id')
    .where((eb) => liveOn(eb, [release]))
    .orderBy('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * The one filter of "a live run on one of `releases`" (every state of `LIVE_STATES`, paused
 * included), for the statements that list, count and move such runs: a quarantine stops, a
 * requeue moves and the commands' live-run counts name the same runs.
 */
function liveOn(eb: ExpressionBuilder<DB, 'workflows'>, releases: readonly string[]) {
  return eb.and([eb('release_id', 'in', [...releases]), eb('state', 'in', LIVE_STATES)]);
}

/**
 * How many runs the ledger holds live on `releases` (every state of `LIVE_STATES`, paused
 * included): after a rollback or a retirement drained them, each waits there — with or without a
 * job in Redis (a run waiting on its approval has none) — until `queues requeue` moves it or
 * `queues quarantine` stops it, the same runs those commands choose (ADR 0673, 0711).
 */
export async function liveRunCount(db: Db | Trx, releases: readonly string[]): Promise<number> {
  if (!releases.length) return 0;
  const row = await db
    .selectFrom('workflows')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where((eb) => liveOn(eb, releases))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/**
 * The one check that a requeue names two releases.
 * @throws OpsUsageError (`same_release`) when `from` and `to` are the same release.
 */
export function requireDistinctReleases(from: string, to: string): void {
  if (from === to) throw new OpsUsageError('same_release', `queues requeue --from ${from} --to ${to}: the two releases must differ`);
}

/** Thrown when the former release cannot accept the candidate's job payloads. */
export class RequeueRefused extends ConflictError {
  constructor(message: string) {
    super('payload_version_mismatch', message);
  }
}

/** A queued job of the source release that parses under the target's contract, with its payload for the target. */
interface MovableJob {
  base: keyof typeof queueContracts;
  job: Job;
  payload: { workflowId?: string };
}

/**
 * Splits the queued jobs of a requeue: those whose payload, carrying release `to`, parses under
 * its queue contract (movable), and the others (refused: left in place for quarantine), with the
 * runs that have only refused jobs (they stay on the source release).
 */
function partitionJobs(
  jobs: Array<{ base: keyof typeof queueContracts; job: Job }>,
  to: string,
): { movable: MovableJob[]; refused: number; refusedRuns: Set<string> } {
  const movable: MovableJob[] = [];
  const refusedRuns = new Set<string>();
  let refused = 0;
  for (const { base, job } of jobs) {
    const parsed = queueContracts[base].schema.safeParse({ ...(job.data as object), release: to });
    if (parsed.success) {
      movable.push({ base, job, payload: parsed.data as { workflowId?: string } });
      continue;
    }
    refused++;
    const workflowId = (job.data as { workflowId?: unknown }).workflowId;
    if (typeof workflowId === 'string') refusedRuns.add(workflowId);
  }
  // A run with a job that moves goes with it (its moved job must find it on the target).
  for (const m of movable) if (m.payload.workflowId) refusedRuns.delete(m.payload.workflowId);
  return { movable, refused, refusedRuns };
}

/**
 * Moves, in `trx`, every live run of release `from` to release `to`, except the runs in `keep`
 * (a refused job of theirs stays queued on `from`, for quarantine). Every one, not only the runs
 * with a queued job: a run whose job is running on `from` while the requeue runs has none queued,
 * and left on `from` its next job would wait on a drained queue that no worker and no watchdog
 * ever moves. Moved, the ledger names it on `to`, whose watchdog re-drives whatever it waits for
 * that is not in `to`'s queues (ADR 0673). Returns each moved run's tenant (its fair key) and how
 * many of them were paused on a held step.
 */
async function moveLiveRuns(
  trx: Trx,
  from: string,
  to: string,
  keep: Set<string>,
): Promise<{ tenants: Map<string, string>; paused: number }> {
  let q = trx
    .updateTable('workflows')
    .set({ release_id: to, updated_at: new Date() })
    .where((eb) => liveOn(eb, [from]));
  if (keep.size) q = q.where('id', 'not in', [...keep]);
  const moved = await q.returning(['id', 'tenant', 'state']).execute();
  return { tenants: new Map(moved.map((w) => [w.id, w.tenant])), paused: moved.filter((w) => w.state === 'paused').length };
}

/**
 * Adds each movable job to the same queue of release `to`, with its deterministic job id (a
 * repeated requeue after a crash is a no-op for the jobs already moved) and its run's tenant as
 * fair key, then removes it from the source queue.
 */
async function addMovedJobs(queues: QueueRegistry, to: string, movable: MovableJob[], tenants: Map<string, string>): Promise<void> {
  for (const { base, job, payload } of movable) {
    const contract = queueContracts[base];
    const fairKey = payload.workflowId ? tenants.get(payload.workflowId) : undefined;
    await queues.add(
      queueName(base, to),
      contract.jobName,
      payload,
      { ...contract.options, jobId: contract.jobId(payload as never) },
      fairKey,
    );
    await job.remove();
  }
}

/**
 * The target of a requeue must be served and accept the source's payloads.
 * @throws Error when `to` is not registered; QueueOpRefused when it is retired or draining;
 *   RequeueRefused when its payload version differs from `from`'s.
 */
async function assertRequeueTarget(db: Db, from: string, to: string): Promise<void> {
  const target = await assertRegistered(db, to);
  if (target.status === 'retired' || target.draining) {
    throw new QueueOpRefused(
      `release ${to} is ${target.draining ? 'draining' : 'retired'}: no worker would run the jobs moved there; requeue to the serving release`,
    );
  }
  const [c, f] = [loadReleaseManifest(from), loadReleaseManifest(to)];
  if (c.payloadVersion !== f.payloadVersion) {
    throw new RequeueRefused(
      `release ${to} accepts payload version ${f.payloadVersion}, ${from} wrote ${c.payloadVersion}: quarantine instead`,
    );
  }
}

/**
 * `gatehouse queues requeue --from C --to F`: moves every queued job of C to the same queue of
 * F — only when F's manifest accepts C's payload version and each payload parses under its
 * queue contract (others are left in place and reported, for quarantine). Every live run of C
 * moves to release F (paused ones, and ones whose job is still running on C, included), except
 * the runs of refused jobs, so their next jobs are F's; a running job's next job written on C
 * after all is re-driven onto F by F's watchdog (ADR 0673). Audited. Returns the counts.
 * @throws OpsUsageError when C and F are the same release; QueueOpRefused when C is not draining, or F is retired
 *   or draining (its workers would not run the jobs); Error when either is not registered;
 *   RequeueRefused when the payload versions differ.
 */
export async function requeueRelease(
  db: Db,
  queues: QueueRegistry,
  from: string,
  to: string,
  actor: OpsActor,
): Promise<{ moved: number; refused: number; pausedWorkflows: number }> {
  requireDistinctReleases(from, to);
  await assertDraining(db, from, 'requeue');
  await assertRequeueTarget(db, from, to);
  const { movable, refused, refusedRuns } = partitionJobs(await queuedJobs(queues, from), to);
  // The runs move first, committed before any job does: a moved job that runs at once on F
  // must find its run on F, or its next job would be enqueued on C's drained queue.
  const { tenants, paused } = await inTransaction(db, async (trx) => {
    // Their wait on the drained release was on-call's: credited before they move (ADR 0699).
    await creditDrainWait(trx, from, refusedRuns);
    const runs = await moveLiveRuns(trx, from, to, refusedRuns);
    const outcome = `from:${from};moved:${movable.length};refused:${refused};paused_workflows:${runs.paused};live_runs:${runs.tenants.size}`;
    await recordQueueOps(trx, 'queues.requeued', actor, outcome, to);
    return runs;
  });
  await addMovedJobs(queues, to, movable, tenants);
  return { moved: movable.length, refused, pausedWorkflows: paused };
}
