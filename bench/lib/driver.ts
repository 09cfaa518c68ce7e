import { Latencies, nowMs, round, type LatencySummary } from './stats.ts';

/** Outcome of {@link closedLoop}: latency per operation (ms), wall time (ms), throughput (ops/s). */
export interface LoadResult {
  concurrency: number;
  /** Operations run (fewer than asked when the time box ended the run). */
  ops: number;
  latency: LatencySummary;
  durationMs: number;
  opsPerSec: number;
  /** Operations that threw (each is also left out of the latency figures). */
  errors: number;
  firstError: string | null;
}

/**
 * Runs `n` operations with exactly `concurrency` in flight (a closed loop: each completion
 * starts the next), timing each one. Operation `i` receives its index (0-based). With `maxMs`
 * no operation starts after that many ms (those in flight finish), so a slow machine shortens
 * the run instead of stretching it. Errors are counted, not thrown, so one lost call does not
 * void a whole run's figures.
 */
export async function closedLoop(
  n: number,
  concurrency: number,
  op: (i: number) => Promise<void>,
  opts: { maxMs?: number } = {},
): Promise<LoadResult> {
  const lat = new Latencies();
  let next = 0;
  let errors = 0;
  let firstError: string | null = null;
  const started = nowMs();
  const deadline = started + (opts.maxMs ?? Infinity);
  const lane = async (): Promise<void> => {
    for (;;) {
      if (nowMs() > deadline) return;
      const i = next++;
      if (i >= n) return;
      const t0 = nowMs();
      try {
        await op(i);
        lat.record(nowMs() - t0);
      } catch (err) {
        errors++;
        firstError ??= (err as Error).message;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, lane));
  const durationMs = nowMs() - started;
  const ops = Math.min(next, n);
  return {
    concurrency,
    ops,
    latency: lat.summary(),
    durationMs: round(durationMs),
    opsPerSec: round(((ops - errors) * 1000) / durationMs),
    errors,
    firstError,
  };
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * A map of pending waits keyed by id: `wait(id)` resolves when `settle(id, value)` is called,
 * or rejects after `timeoutMs`. A settle that arrives before its wait is kept for it.
 */
export class Waiters<T> {
  readonly #pending = new Map<string, { resolve: (v: T) => void; timer: NodeJS.Timeout }>();
  readonly #early = new Map<string, T>();

  /** Waits for `id`, failing with a message naming it after `timeoutMs`. */
  wait(id: string, timeoutMs: number): Promise<T> {
    const early = this.#early.get(id);
    if (early !== undefined) {
      this.#early.delete(id);
      return Promise.resolve(early);
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${id}`));
      }, timeoutMs);
      this.#pending.set(id, { resolve, timer });
    });
  }

  /** Settles the wait for `id` (or keeps the value for a later wait). */
  settle(id: string, value: T): void {
    const p = this.#pending.get(id);
    if (!p) {
      this.#early.set(id, value);
      return;
    }
    clearTimeout(p.timer);
    this.#pending.delete(id);
    p.resolve(value);
  }
}
