import { MetricReader } from '@opentelemetry/sdk-metrics';

/** One data point as a probe reads it: its labels and value (a number, or a histogram's summary). */
export interface ProbePoint {
  attributes: Record<string, unknown>;
  value: number | { count: number; sum?: number; min?: number; max?: number };
}

/**
 * An in-memory, pull-based metric reader for tests: pass it to `startTelemetry({metricReaders})`
 * and read what the real recording path produced. `read()` collects once and returns the points
 * of each metric by name (cumulative since start).
 * @throws Error when the collection reports errors.
 */
export class MetricsProbe extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}

  /** Collects now: metric name → its data points. */
  async read(): Promise<Map<string, ProbePoint[]>> {
    const { resourceMetrics, errors } = await this.collect();
    if (errors.length) throw new Error(`metric collection failed: ${errors.map(String).join('; ')}`);
    const out = new Map<string, ProbePoint[]>();
    for (const sm of resourceMetrics.scopeMetrics)
      for (const m of sm.metrics) out.set(m.descriptor.name, [...(out.get(m.descriptor.name) ?? []), ...(m.dataPoints as ProbePoint[])]);
    return out;
  }

  /**
   * Sum of a counter's points (or a histogram's counts) whose labels include `match`, read now.
   */
  async total(name: string, match: Record<string, string> = {}): Promise<number> {
    return sumPoints((await this.read()).get(name) ?? [], match);
  }
}

/** Sum of points (counter values, or histogram counts) whose labels include `match`. */
export function sumPoints(points: ProbePoint[], match: Record<string, string> = {}): number {
  return points
    .filter((p) => Object.entries(match).every(([k, v]) => p.attributes[k] === v))
    .reduce((n, p) => n + (typeof p.value === 'number' ? p.value : p.value.count), 0);
}
