import { sql, type RawBuilder } from 'kysely';
import {
  AS_A_NEW_TICKET,
  approvalRequestsQueue,
  executionsQueue,
  proposalsQueue,
  queueName,
  turnsQueue,
  type Dependency,
  type QueueContract,
} from '@gatehouse/contracts';
import {
  enqueueInTransaction,
  inTransaction,
  isTerminal,
  latestRedrives,
  LIVE_STATES,
  recordAudit,
  runNeeds,
  STATE_LIVENESS,
  STEP_FAILED,
  stopRun,
  type AwaitedJobRef,
  type Db,
  outboxFairKey,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import { within, type Logger, type OutboxRelay, type QueueRegistry } from '@gatehouse/platform';

/** Settings of the watchdog (executor environment, see main.ts). */
export interface WatchdogSettings {
  /** Release whose runs this executor watches (its queues are the ones it re-drives). */
  release: string;
  /** A run is looked at once its last state change is this old, ms (longer than a publish). */
  graceMs: number;
  /** Re-drives of one run before it is stopped as `stopped(step_failed)` (a job that cannot progress). */
  maxRedrives: number;
  /** Bound on each Redis call, ms: with Redis down the pass gives up and rolls back. */
  redisTimeoutMs: number;
  /** Runs looked at per pass, oldest first. */
  batch: number;
}

/** Dependencies of {@link watchdogPass}. */
export interface WatchdogDeps {
  db: Db;
  queues: QueueRegistry;
  relay: OutboxRelay;
  log: Logger;
  settings: WatchdogSettings;
}

/** Why a job is re-driven: gone from Redis, dead-lettered, or finished without its effect past the bound. */
export type RedriveReason = 'missing' | 'failed' | 'stale';

/** What one pass did. */
export type WatchdogReport =
  | { kind: 'skipped' } // another replica holds the lock
  | {
      kind: 'ran';
      checked: number;
      redriven: Array<{ workflowId: string; jobId: string; reason: RedriveReason }>;
      stopped: string[];
    };

/**
 * Advisory-lock key of the watchdog of `release` (one replica of a release re-drives at a time):
 * `hashtext('gatehouse.watchdog:<release>')`. Per release: a pass only looks at its own release's
 * runs, so a candidate's watchdog never skips its pass because the active release's holds the lock.
 */
export function watchdogLock(release: string): RawBuilder<number> {
  return sql<number>`hashtext(${`gatehouse.watchdog:${release}`})`;
}

type AnyJob = { release: string };
/** Contracts of the jobs the ledger alone can rebuild (a result's output lives only in its outbox row). */
const CONTRACTS: Record<string, QueueContract<AnyJob>> = {
  turns: turnsQueue as unknown as QueueContract<AnyJob>,
  proposals: proposalsQueue as unknown as QueueContract<AnyJob>,
  'approval-requests': approvalRequestsQueue as unknown as QueueContract<AnyJob>,
  executions: executionsQueue as unknown as QueueContract<AnyJob>,
};

// 'paused': waiting in a queue on-call drained (`gatehouse queues drain`); it runs when resumed.
const LIVE_JOB = new Set(['waiting', 'active', 'delayed', 'prioritized', 'waiting-children', 'paused']);

interface SourceRow {
  queue: string;
  job_name: string;
  job_id: string;
  payload: Record<string, unknown>;
  release_id: string;
  published_at: Date | null;
}

/**
 * The newest outbox row of a job id (an execution resumed by on-call carries a `_resume<n>`
 * suffix), as it applies to the run's current release: a run requeued to another release
 * (`gatehouse queues requeue`) has its jobs in that release's queue, with that release in the payload.
 */
async function sourceRow(trx: Trx, ref: AwaitedJobRef, release: string): Promise<SourceRow | undefined> {
  let q = trx.selectFrom('outbox').select(['queue', 'job_name', 'job_id', 'payload', 'release_id', 'published_at']);
  q =
    ref.kind === 'execution'
      ? q.where((eb) => eb.or([eb('job_id', '=', ref.jobId), eb('job_id', 'like', `${ref.jobId}\\_resume%`)]))
      : q.where('job_id', '=', ref.jobId);
  const row = (await q.orderBy('id', 'desc').limit(1).executeTakeFirst()) as SourceRow | undefined;
  if (!row || row.release_id === release) return row;
  return { ...row, queue: queueName(ref.queue, release), payload: { ...row.payload, release }, release_id: release };
}

/**
 * The dependency whose loss a re-drive of each reason stands for, whose wait is not the run's
 * working time: Redis lost a `missing` job; the ledger lost the effect of a `stale` one (the job
 * completed, the run never moved). A `failed` job was dead-lettered by its consumer, whose own
 * hold already marked any outage.
 */
const LOST_FROM: Record<RedriveReason, Dependency | null> = { missing: 'redis', stale: 'postgres', failed: null };

/**
 * Writes the re-drive: a copy of the job's outbox row (same deterministic id and payload) or, with
 * none, one rebuilt from the ledger. A job that Redis lost (`missing` after it was published) was
 * waiting on the queue store since it was published: the copy carries that as an outage of
 * `redis` (unless it names one already), so the consumer credits the wait to the run's deadline
 * (docs/decisions/0110-outage-time.md). A job that finished without its effect (`stale`: a
 * promote that lost the ledger's last commits) waited on the ledger since then: an outage of
 * `postgres` (docs/decisions/0776-a-stale-re-drive-is-ledger-outage-time.md).
 */
async function writeRedrive(
  trx: Trx,
  t: { ref: AwaitedJobRef; source: SourceRow | undefined; reason: RedriveReason },
  release: string,
): Promise<OutboxRow | null> {
  const { ref, source } = t;
  if (source) {
    const lostFrom = LOST_FROM[t.reason];
    const lostAt = lostFrom && source.published_at && !source.payload.outage ? source.published_at : null;
    const payload = lostAt ? { ...source.payload, outage: { dependency: lostFrom, sinceMs: lostAt.getTime() } } : source.payload;
    const row = await trx
      .insertInto('outbox')
      .values({
        queue: source.queue,
        job_name: source.job_name,
        job_id: source.job_id,
        payload: JSON.stringify(payload),
        release_id: source.release_id,
      })
      .returning(['id', 'queue', 'job_name', 'job_id', 'payload', outboxFairKey.as('fair_key')])
      .executeTakeFirstOrThrow();
    return row as OutboxRow;
  }
  const contract = CONTRACTS[ref.queue];
  if (!contract || !ref.payload) return null;
  return enqueueInTransaction(trx, contract, { ...ref.payload, release } as AnyJob);
}

/** Decides whether one awaited job needs a re-drive: null while it is live, finished in time, or still unpublished. */
async function redriveReason(deps: WatchdogDeps, source: SourceRow | undefined, pastBound: boolean): Promise<RedriveReason | null> {
  if (!source) return pastBound ? 'missing' : null; // nothing ever enqueued it: rebuilt only past the bound
  if (!source.published_at) return null; // the outbox sweep publishes it
  const queue = deps.queues.get(source.queue);
  const state = await within(queue.getJobState(source.job_id), deps.settings.redisTimeoutMs);
  if (LIVE_JOB.has(state)) return null;
  if (state === 'failed') return 'failed';
  if (state === 'completed') return pastBound ? 'stale' : null;
  return 'missing';
}

/** The columns of a live run a pass reads. */
interface RunRow {
  id: string;
  state: string;
  round: number;
  release_id: string;
  updated_at: Date;
}

interface Planned {
  rows: OutboxRow[];
  /** Jobs to remove from their queue before the re-add (failed or stale ones keep their id). */
  remove: Array<{ queue: string; jobId: string }>;
  redriven: Array<{ workflowId: string; jobId: string; reason: RedriveReason }>;
  stopped: string[];
}

/**
 * Stops a run nothing can move any more as `stopped(step_failed)` with a next step for on-call —
 * unless it moved since it was read (another state, a newer `updated_at`) or is already terminal.
 */
async function stopStuck(trx: Trx, wf: RunRow, nextStep: string, plan: Planned): Promise<void> {
  const locked = await trx.selectFrom('workflows').select(['state', 'updated_at']).where('id', '=', wf.id).forUpdate().executeTakeFirst();
  if (!locked || isTerminal(locked.state) || locked.state !== wf.state) return;
  if (new Date(locked.updated_at).getTime() !== new Date(wf.updated_at).getTime()) return;
  await stopRun(trx, wf, STEP_FAILED, nextStep, 'executor');
  plan.stopped.push(wf.id);
}

/** Checks one run and writes its re-drives (or its stop, past the re-drive limit) in `trx`. */
async function checkRun(deps: WatchdogDeps, trx: Trx, wf: RunRow, nowMs: number, plan: Planned): Promise<void> {
  const needs = await runNeeds(trx, { ...wf, state: wf.state as never }, nowMs);
  const boundMs = STATE_LIVENESS[wf.state as keyof typeof STATE_LIVENESS]?.boundMs ?? Infinity;
  const pastBound = nowMs - new Date(wf.updated_at).getTime() > boundMs;
  const waitsOnPerson = needs.humanWait !== null && needs.humanWait.untilMs + boundMs > nowMs;
  if (pastBound && !needs.jobs.length && !waitsOnPerson) {
    const next = `No job and no pending decision can move this run (state ${wf.state}); on-call should check the service logs, then resubmit the rest ${AS_A_NEW_TICKET}.`;
    return stopStuck(trx, wf, next, plan);
  }
  const todo: Array<{ ref: AwaitedJobRef; source: SourceRow | undefined; reason: RedriveReason }> = [];
  for (const ref of needs.jobs) {
    const source = await sourceRow(trx, ref, wf.release_id);
    const reason = await redriveReason(deps, source, pastBound);
    if (reason) todo.push({ ref, source, reason });
  }
  if (!todo.length) return;
  const done = (await latestRedrives(trx, [wf.id])).get(wf.id)?.count ?? 0;
  if (done >= deps.settings.maxRedrives) {
    // Never stopped around an execution, whose effect may have happened (docs/decisions/0070):
    // past the limit such a run stays listed as stuck for on-call.
    if (todo.some((t) => t.ref.kind === 'execution')) return;
    const jobs = todo.map((t) => t.ref.jobId).join(', ');
    const next = `The watchdog re-drove this run ${done} times and it still cannot progress (${jobs}); on-call should check the service logs, then resubmit the rest ${AS_A_NEW_TICKET}.`;
    return stopStuck(trx, wf, next, plan);
  }
  for (const t of todo) {
    const row = await writeRedrive(trx, t, wf.release_id);
    if (!row) continue;
    await recordAudit(trx, {
      type: 'run.redriven',
      service: 'executor',
      runId: wf.id,
      step: wf.round,
      outcome: `${t.ref.queue}:${t.reason}`,
      attempts: done + 1,
      revisions: { release: wf.release_id },
    });
    plan.rows.push(row);
    if (t.reason !== 'missing') plan.remove.push({ queue: row.queue, jobId: row.job_id });
    plan.redriven.push({ workflowId: wf.id, jobId: row.job_id, reason: t.reason });
  }
}

/**
 * One watchdog pass (docs/decisions/0100): under a transaction-scoped advisory lock of its release
 * ({@link watchdogLock}: one replica of the release at a time; the others skip), looks at this release's live runs whose last state change is
 * older than `graceMs`, derives from the ledger the jobs each waits for ({@link runNeeds}), and
 * re-drives every job that is missing from Redis, dead-lettered, or finished without its effect
 * past the state's bound — with the same deterministic job id and payload, audited
 * `run.redriven`. A live job is left alone; a finished effect is not awaited at all; consumers
 * are idempotent against the ledger, so a re-drive never doubles an effect. A run re-driven
 * `maxRedrives` times stops as `stopped(step_failed)` — unless it waits for an execution, which
 * is never stopped around (it stays listed as stuck); so does a run past its bound that no job
 * and no pending decision can move. Re-driven jobs are published after COMMIT.
 * @throws the database or Redis error (a Redis call past `redisTimeoutMs` rolls the pass back).
 */
export async function watchdogPass(deps: WatchdogDeps, nowMs = Date.now()): Promise<WatchdogReport> {
  const { settings } = deps;
  const plan: Planned = { rows: [], remove: [], redriven: [], stopped: [] };
  let checked = 0;
  const locked = await inTransaction(deps.db, async (trx) => {
    Object.assign(plan, { rows: [], remove: [], redriven: [], stopped: [] });
    const got = await sql<{ ok: boolean }>`SELECT pg_try_advisory_xact_lock(${watchdogLock(settings.release)}) AS ok`.execute(trx);
    if (!got.rows[0]?.ok) return false;
    const runs = await trx
      .selectFrom('workflows')
      .select(['id', 'state', 'round', 'release_id', 'updated_at'])
      .where('state', 'in', LIVE_STATES)
      .where('release_id', '=', settings.release)
      .where('updated_at', '<', new Date(nowMs - settings.graceMs))
      .orderBy('updated_at')
      .limit(settings.batch)
      .execute();
    checked = runs.length;
    for (const wf of runs) await checkRun(deps, trx, wf, nowMs, plan);
    return true;
  });
  if (!locked) return { kind: 'skipped' };
  for (const r of plan.remove) {
    const job = await within(deps.queues.get(r.queue).getJob(r.jobId), settings.redisTimeoutMs);
    await job
      ?.remove()
      .catch((err: unknown) => deps.log.warn({ err: (err as Error).message, jobId: r.jobId }, 'watchdog could not remove a job'));
  }
  await deps.relay.publish(plan.rows);
  // The pass ends with its re-drives marked published, so the next pass judges them as sent
  // (not as rows the sweep still has to publish; docs/decisions/0370-batched-outbox-marks.md).
  await within(deps.relay.flushMarks(), settings.redisTimeoutMs).catch(() =>
    deps.log.warn('watchdog: marking its re-drives published is slow; the next pass may judge them unpublished'),
  );
  for (const r of plan.redriven) deps.log.warn(r, 'watchdog re-drove a job a live run was waiting for');
  for (const id of plan.stopped) deps.log.warn({ workflowId: id }, 'watchdog stopped a run that re-drives could not move');
  return { kind: 'ran', checked, redriven: plan.redriven, stopped: plan.stopped };
}

/** A running watchdog; `stop()` waits for the pass in flight. */
export interface Watchdog {
  stop: () => Promise<void>;
}

/** Runs {@link watchdogPass} every `intervalMs`; a pass still running skips the tick. Errors are logged. */
export function startWatchdog(deps: WatchdogDeps, intervalMs: number): Watchdog {
  let running: Promise<unknown> | undefined;
  const timer = setInterval(() => {
    if (running) return;
    running = watchdogPass(deps)
      .catch((err: unknown) => deps.log.warn({ err: (err as Error).message }, 'watchdog pass failed; next tick retries'))
      .finally(() => {
        running = undefined;
      });
  }, intervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}
