import type { Queue } from 'bullmq';
import { Latencies, type LatencySummary } from './stats.ts';

/** When BullMQ saw a job: added (`timestamp`), taken by a worker (`processedOn`), finished; epoch ms. */
export interface JobTimes {
  timestamp: number;
  processedOn: number | null;
  finishedOn: number | null;
  /** Attempts BullMQ made (more than 1: the job failed and was retried after a backoff). */
  attemptsMade: number;
}

/** BullMQ's own timestamps of the jobs `ids` of `queue` (missing jobs are left out). */
export async function jobTimes(queue: Queue, ids: string[]): Promise<Map<string, JobTimes>> {
  const out = new Map<string, JobTimes>();
  for (let i = 0; i < ids.length; i += 100) {
    const part = ids.slice(i, i + 100);
    const jobs = await Promise.all(part.map((id) => queue.getJob(id)));
    jobs.forEach((job, j) => {
      if (job)
        out.set(part[j]!, {
          timestamp: job.timestamp,
          processedOn: job.processedOn ?? null,
          finishedOn: job.finishedOn ?? null,
          attemptsMade: job.attemptsMade,
        });
    });
  }
  return out;
}

/**
 * Per-stage durations of many operations: `add(stage, ms)` for each operation's stages (in
 * order of first appearance), `summary()` the p50 and mean of each and its share of the summed
 * means — the stage with the largest share is the one that dominates.
 */
export class StageBreakdown {
  readonly #stages = new Map<string, Latencies>();

  /** Records `ms` for `stage` (skipped when not finite, e.g. a timestamp was missing). */
  add(stage: string, ms: number | null | undefined): void {
    if (ms == null || !Number.isFinite(ms)) return;
    let l = this.#stages.get(stage);
    if (!l) this.#stages.set(stage, (l = new Latencies()));
    l.record(Math.max(0, ms));
  }

  /** Stage → {p50 ms, mean ms, share of the summed means 0–1, samples}. */
  summary(): Record<string, StageSummary> {
    const sums = [...this.#stages].map(([k, l]) => [k, l.summary()] as const);
    const total = sums.reduce((s, [, x]) => s + x.mean, 0);
    return Object.fromEntries(
      sums.map(([k, x]) => [k, { p50: x.p50, mean: x.mean, share: total ? Math.round((x.mean / total) * 100) / 100 : 0, n: x.n }]),
    );
  }
}

/** One stage of {@link StageBreakdown.summary}: ms, share of the whole (0–1). */
export interface StageSummary extends Pick<LatencySummary, 'p50' | 'mean' | 'n'> {
  share: number;
}

/** The stage with the largest mean share, as `name (NN %)`. */
export function dominantStage(stages: Record<string, StageSummary>): string {
  const top = Object.entries(stages).sort((a, b) => b[1].mean - a[1].mean)[0];
  return top ? `${top[0]} (${Math.round(top[1].share * 100)} %)` : 'n/a';
}
