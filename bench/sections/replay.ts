import { randomInt } from 'node:crypto';
import { QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { executionsQueue, jobOptionsFor, queueName, type ExecutionJob } from '@gatehouse/contracts';
import type { BenchSizes } from '../config.ts';
import { diffCounts, total, type ProcessCounts } from '../lib/counters.ts';
import { chunks, endSeededRuns, seedApprovals, type SeededApproval } from '../lib/seed.ts';
import { nowMs, ratio, round } from '../lib/stats.ts';
import { sampleWaits, type WaitProfile } from '../lib/pg-waits.ts';

import { REDIS_URL, RELEASE, type BenchWorld } from '../lib/world.ts';

/** One replay run: every execution job of its actions delivered `deliveries` times. */
export interface ReplayRun {
  deliveries: number;
  jobs: number;
  /** Jobs that finished before the run's time budget ran out (the rest were removed). */
  finishedJobs: number;
  /** All jobs finished within the budget (when false, every figure covers a partial run). */
  completed: boolean;
  /** First add → last job finished, ms (the jitter window is inside it, as for every run). */
  durationMs: number;
  jobsPerSec: number;
  /** Executor outcome (the job's return value, e.g. `succeeded`, `replay:succeeded`) → jobs. */
  outcomes: Record<string, number>;
  /** Jobs that ended failed after all their attempts. */
  failed: number;
  /** Refunds the payments ledger holds under this run's idempotency keys (must equal the actions). */
  effects: number;
  /** Keys holding more than one refund at the payments ledger (must be 0, complete run or not). */
  duplicateEffects: number;
  /** Refund POSTs the payments ledger received for this run's keys (replays never reach it). */
  downstreamPosts: number;
  /** Approvals consumed (`used`) — exactly one per action. */
  approvalsUsed: number;
  /** Round trips of every service during the run (audit included). */
  counts: ProcessCounts;
  /** What our Postgres backends waited on during the run. */
  pgWaits: WaitProfile;
}

/** The duplicate-delivery load test (docs/product/users-and-tools.md#users, load testers): a clean run against a 10× duplicated one. */
export interface ReplayReport {
  actions: number;
  executors: number;
  jitterMs: number;
  clean: ReplayRun;
  duplicate: ReplayRun;
  /**
   * Time per action with all its deliveries, duplicated run over clean run:
   * `(dup ms / dup jobs finished × deliveries) / (clean ms / clean jobs finished)`. For complete
   * runs this is the ratio of their times; a run cut by the budget contributes its finished part.
   */
  costRatio: number | null;
  /** The same ratio for Postgres round trips (all services). */
  pgRatio: number | null;
  /** Both runs complete with effects = actions, one POST each, one approval consumed each, no failures. */
  exactlyOnce: boolean;
  /** No key holds two refunds and no approval was consumed twice, in either run (complete or not). */
  noDuplicateEffects: boolean;
  /** Time budget of the two runs, ms (a third for the clean run, the rest for the duplicated one). */
  budgetMs: number;
}

/**
 * Starts `replayExecutors` executor processes and seeds `replayActions` approved refunds (1 cent,
 * R7, approved by lead-eli) on `orders` twice, each set just before its run: the first set's
 * execution jobs are delivered once (clean), the second set's `replayDeliveries` times each (distinct job ids, so BullMQ
 * does not collapse them), every delivery delayed by a random 0…`replayJitterMs` ms. Effects are
 * counted at the payments ledger's read-back and request log, not by the executor. A run that
 * has not finished when its share of `budgetMs` is spent is cut short (its waiting jobs
 * removed) and reported as incomplete, so the whole benchmark keeps to its time limit.
 */
export async function runReplay(w: BenchWorld, sizes: BenchSizes, orders: string[], budgetMs: number): Promise<ReplayReport> {
  await w.setExecutors(sizes.replayExecutors);
  // Each half is seeded just before its run: a seeded approved action nobody delivers is, past
  // two minutes, a run the watchdog re-drives, which would execute the second half early.
  const seed = (): Promise<SeededApproval[]> => seedApprovals(w.db, sizes.replayActions, orders, { amountCents: 1, approved: true });
  const first = await seed();
  const t0 = nowMs();
  const clean = await deliver(w, sizes, first, 1, budgetMs / 3);
  const second = await seed();
  const duplicate = await deliver(w, sizes, second, sizes.replayDeliveries, budgetMs - (nowMs() - t0));
  w.notePeakRss();
  const ok = (r: ReplayRun): boolean =>
    r.effects === sizes.replayActions &&
    r.downstreamPosts === sizes.replayActions &&
    r.approvalsUsed === sizes.replayActions &&
    r.failed === 0 &&
    r.completed;
  return {
    actions: sizes.replayActions,
    executors: w.executorCount,
    jitterMs: sizes.replayJitterMs,
    clean,
    duplicate,
    costRatio: ratio(perAction(duplicate, duplicate.durationMs), perAction(clean, clean.durationMs)),
    pgRatio: ratio(perAction(duplicate, duplicate.counts.pg), perAction(clean, clean.counts.pg)),
    exactlyOnce: ok(clean) && ok(duplicate),
    noDuplicateEffects: [clean, duplicate].every(
      (r) => r.duplicateEffects === 0 && r.downstreamPosts === r.effects && r.approvalsUsed === r.effects,
    ),
    budgetMs: round(budgetMs),
  };
}

/** `amount` per action with all its deliveries (from the jobs that finished). */
function perAction(r: ReplayRun, amount: number): number | null {
  return r.finishedJobs ? (amount / r.finishedJobs) * r.deliveries : null;
}

async function deliver(
  w: BenchWorld,
  sizes: BenchSizes,
  actions: SeededApproval[],
  deliveries: number,
  timeoutMs: number,
): Promise<ReplayRun> {
  const queue = w.queues.get(queueName('executions', RELEASE));
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const events = new QueueEvents(queue.name, { connection, prefix: w.prefix });
  await events.waitUntilReady();
  const jobs = actions.flatMap((a) =>
    Array.from({ length: deliveries }, (_, k) => {
      const data: ExecutionJob = {
        release: RELEASE,
        workflowId: a.workflowId,
        actionId: a.actionId,
        actionVersion: 1,
        approvalId: a.approvalId,
      };
      const id = deliveries === 1 ? executionsQueue.jobId(data) : `${executionsQueue.jobId(data)}_d${k}`;
      return {
        name: executionsQueue.jobName,
        data,
        opts: { ...jobOptionsFor(queue.name), jobId: id, delay: randomInt(0, sizes.replayJitterMs + 1) },
      };
    }),
  );
  // Interleave deliveries of different actions, as redeliveries arrive in practice.
  for (let i = jobs.length - 1; i > 0; i--) {
    const j = randomInt(0, i + 1);
    [jobs[i], jobs[j]] = [jobs[j]!, jobs[i]!];
  }
  const ids = new Set(jobs.map((j) => j.opts.jobId));
  const outcomes: Record<string, number> = {};
  let finished = 0;
  let failed = 0;
  let lastMs = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((r) => (allDone = r));
  const finish = (): void => {
    lastMs = nowMs();
    if (++finished === jobs.length) allDone();
  };
  events.on('completed', ({ jobId, returnvalue }) => {
    if (!ids.has(jobId)) return;
    const v = String(returnvalue);
    outcomes[v] = (outcomes[v] ?? 0) + 1;
    finish();
  });
  events.on('failed', ({ jobId }) => {
    if (!ids.has(jobId)) return;
    failed++;
    finish();
  });
  const before = await w.counts();
  const sampler = sampleWaits(w.db, w.database!.name);
  const t0 = nowMs();
  for (const part of chunks(jobs, 500)) await queue.addBulk(part);
  const timeout = setTimeout(allDone, Math.max(1000, timeoutMs));
  await done;
  clearTimeout(timeout);
  const completed = finished === jobs.length;
  if (!completed) {
    // Out of time: remove what has not started and let the started jobs finish.
    await queue.drain(true);
    for (let i = 0; i < 100 && (await queue.getActiveCount()) > 0; i++) await new Promise((r) => setTimeout(r, 200));
    // Actions whose every delivery was drained were never claimed: end their runs, or two minutes
    // on the watchdog would rebuild their execution and run it during a later section.
    const unclaimed = await w.db
      .selectFrom('actions')
      .select('workflow_id')
      .where(
        'id',
        'in',
        actions.map((a) => a.actionId),
      )
      .where('status', '=', 'approved')
      .execute();
    await endSeededRuns(
      w.db,
      unclaimed.map((r) => r.workflow_id),
    );
  }
  const pgWaits = await sampler.stop();
  const durationMs = (completed ? lastMs : nowMs()) - t0;
  const counts = total(diffCounts(await w.counts(), before));
  await events.close();
  connection.disconnect();

  const keys = new Set(actions.map((a) => a.operationKey));
  let effects = 0;
  let downstreamPosts = 0;
  const refunded = new Set<string>();
  const staging = w.url('staging');
  for (const orderId of new Set(actions.map((a) => a.orderId))) {
    const refunds = (await (await fetch(`${staging}/ledger/refunds?orderId=${orderId}`)).json()) as {
      refunds: Array<{ idempotencyKey: string }>;
    };
    for (const r of refunds.refunds.filter((x) => keys.has(x.idempotencyKey))) {
      effects++;
      refunded.add(r.idempotencyKey);
    }
    const log = (await (await fetch(`${staging}/requests?orderId=${orderId}&target=payments`)).json()) as {
      requests: Array<{ method: string; idempotencyKey: string | null }>;
    };
    downstreamPosts += log.requests.filter((r) => r.method === 'POST' && r.idempotencyKey && keys.has(r.idempotencyKey)).length;
  }
  const used = await w.db
    .selectFrom('approvals')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where(
      'id',
      'in',
      actions.map((a) => a.approvalId),
    )
    .where('status', '=', 'used')
    .executeTakeFirstOrThrow();
  return {
    deliveries,
    jobs: jobs.length,
    finishedJobs: finished,
    completed,
    durationMs: round(durationMs),
    jobsPerSec: round((finished * 1000) / durationMs),
    outcomes,
    failed,
    effects,
    duplicateEffects: effects - refunded.size,
    downstreamPosts,
    approvalsUsed: Number(used.n),
    counts,
    pgWaits,
  };
}
