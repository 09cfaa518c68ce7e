import { build, type Histogram } from 'hdr-histogram-js';

/** Latency summary of one measurement, all in milliseconds (3 significant digits). */
export interface LatencySummary {
  /** Samples recorded. */
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
}

/**
 * A latency recorder over an HdrHistogram (microsecond resolution, 3 significant digits,
 * values up to one hour), so percentiles are exact to 0.1 % without keeping every sample.
 */
export class Latencies {
  readonly #h: Histogram = build({ lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: 3 });

  /** Records one sample given in milliseconds (fractions kept to the microsecond). */
  record(ms: number): void {
    this.#h.recordValue(Math.max(1, Math.round(ms * 1000)));
  }

  /** Number of samples recorded. */
  get count(): number {
    return this.#h.totalCount;
  }

  /** Percentiles, mean and max in milliseconds. */
  summary(): LatencySummary {
    const h = this.#h;
    const ms = (us: number): number => round(us / 1000);
    return {
      n: h.totalCount,
      p50: ms(h.getValueAtPercentile(50)),
      p90: ms(h.getValueAtPercentile(90)),
      p99: ms(h.getValueAtPercentile(99)),
      mean: ms(h.mean),
      max: ms(h.maxValue),
    };
  }
}

/** Rounds to 3 significant digits (report figures: more would be noise on a shared machine). */
export function round(x: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const digits = Math.max(0, 2 - Math.floor(Math.log10(Math.abs(x))));
  return Number(x.toFixed(Math.min(digits, 6)));
}

/** `a / b` rounded to 3 significant digits, or null when `b` is 0 or missing. */
export function ratio(a: number | null | undefined, b: number | null | undefined): number | null {
  if (a == null || b == null || b === 0) return null;
  return round(a / b);
}

/** High-resolution wall clock, milliseconds (monotonic). */
export function nowMs(): number {
  return performance.now();
}
