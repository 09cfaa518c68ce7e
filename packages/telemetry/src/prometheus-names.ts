import { METRICS } from './metrics.ts';

/** Instrument kinds as the Prometheus translation sees them. */
export type MetricKind = 'counter' | 'updowncounter' | 'histogram' | 'gauge';

/** One metric a service exports: its OpenTelemetry name, instrument kind and unit. */
export interface MetricDef {
  name: string;
  kind: MetricKind;
  unit?: string;
  /** Who creates it: `gatehouse` (packages/telemetry/src/metrics.ts) or the instrumentation library. */
  source: string;
}

/**
 * Metrics the default auto-instrumentations create in every service (packages/telemetry/src/instrumentations.ts;
 * fewer when `OTEL_NODE_ENABLED_INSTRUMENTATIONS` / `OTEL_NODE_DISABLED_INSTRUMENTATIONS` leave some out):
 * http server durations (http), client durations of `fetch` (undici), and the runtime metrics
 * (runtime-node: event-loop delay and utilization, heap, GC). `test/telemetry/metric-registry`
 * asserts each is produced by the libraries as listed (name, kind, unit).
 */
export const INSTRUMENTATION_METRICS: readonly MetricDef[] = [
  { name: 'http.server.request.duration', kind: 'histogram', unit: 's', source: 'instrumentation-http' },
  { name: 'http.client.request.duration', kind: 'histogram', unit: 's', source: 'instrumentation-undici' },
  ...['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'].map((s): MetricDef => ({
    name: `nodejs.eventloop.delay.${s}`,
    kind: 'gauge',
    unit: 's',
    source: 'instrumentation-runtime-node',
  })),
  { name: 'nodejs.eventloop.utilization', kind: 'gauge', unit: '1', source: 'instrumentation-runtime-node' },
  { name: 'nodejs.eventloop.time', kind: 'counter', unit: 's', source: 'instrumentation-runtime-node' },
  { name: 'v8js.gc.duration', kind: 'histogram', unit: 's', source: 'instrumentation-runtime-node' },
  { name: 'v8js.memory.heap.used', kind: 'gauge', unit: 'By', source: 'instrumentation-runtime-node' },
  { name: 'v8js.memory.heap.space.available_size', kind: 'gauge', unit: 'By', source: 'instrumentation-runtime-node' },
  { name: 'v8js.memory.heap.space.physical_size', kind: 'gauge', unit: 'By', source: 'instrumentation-runtime-node' },
  { name: 'v8js.memory.heap.space.size', kind: 'updowncounter', unit: 'By', source: 'instrumentation-runtime-node' },
  { name: 'v8js.resource.active', kind: 'gauge', unit: '{resource}', source: 'instrumentation-runtime-node' },
];

/** Gatehouse's own metrics ({@link METRICS}) as {@link MetricDef}s (counters carry unit `1`). */
export const GATEHOUSE_METRICS: readonly MetricDef[] = Object.values(METRICS).map((m) => ({
  name: m.name,
  kind: m.kind,
  unit: 'unit' in m ? m.unit : m.kind === 'counter' ? '1' : undefined,
  source: 'gatehouse',
}));

/** Every metric the services export: Gatehouse's own and the instrumentations'. */
export const EXPORTED_METRICS: readonly MetricDef[] = [...GATEHOUSE_METRICS, ...INSTRUMENTATION_METRICS];

/** UCUM units → Prometheus suffix words (the collector's table, as far as our units go). */
const UNIT_WORDS: Record<string, string> = {
  d: 'days',
  h: 'hours',
  min: 'minutes',
  s: 'seconds',
  ms: 'milliseconds',
  us: 'microseconds',
  ns: 'nanoseconds',
  By: 'bytes',
  KiBy: 'kibibytes',
  MiBy: 'mebibytes',
  GiBy: 'gibibytes',
  KBy: 'kilobytes',
  MBy: 'megabytes',
  GBy: 'gigabytes',
  '%': 'percent',
  '1': '',
};
const PER_UNIT_WORDS: Record<string, string> = { s: 'second', m: 'minute', h: 'hour', d: 'day', w: 'week', mo: 'month', y: 'year' };

/**
 * The Prometheus metric name the OpenTelemetry Collector's `prometheus` exporter gives a metric
 * (deploy/otel-collector.yaml: no namespace, the default translation with suffixes —
 * OpenTelemetry's "Prometheus and OpenMetrics compatibility" rules as the collector's
 * otlptranslator implements them): the name split at every character other than a letter or
 * digit and joined with `_`; the unit's word appended unless already a token (`ms` →
 * `milliseconds`, `By` → `bytes`, `1` and annotations like `{job}` → nothing, `x/s` →
 * `x_per_second`); `_total` last for a monotonic counter; `_ratio` for a gauge of unit `1`.
 */
export function prometheusName(def: Pick<MetricDef, 'name' | 'kind' | 'unit'>): string {
  const tokens = def.name.split(/[^A-Za-z0-9]+/).filter(Boolean);
  const [main = '', per] = (def.unit ?? '').split('/', 2).map((u) => u.trim());
  const mainWord = main && !/[{}]/.test(main) ? (UNIT_WORDS[main] ?? main) : '';
  const perWord = per && !/[{}]/.test(per) ? (PER_UNIT_WORDS[per] ?? per) : '';
  if (mainWord && !tokens.includes(mainWord)) tokens.push(mainWord);
  if (perWord && !tokens.includes(`per_${perWord}`)) tokens.push(`per_${perWord}`);
  let out = tokens;
  if (def.kind === 'counter') out = [...out.filter((t) => t !== 'total'), 'total'];
  if (def.kind === 'gauge' && def.unit === '1') out = [...out.filter((t) => t !== 'ratio'), 'ratio'];
  const name = out.join('_');
  return /^[0-9]/.test(name) ? `_${name}` : name;
}

/**
 * Series names a scrape of the collector shows for `def`: the name, and for a histogram its
 * `_bucket`, `_sum` and `_count` series.
 */
export function prometheusSeries(def: Pick<MetricDef, 'name' | 'kind' | 'unit'>): string[] {
  const name = prometheusName(def);
  return def.kind === 'histogram' ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name];
}

/** Every series name of {@link EXPORTED_METRICS}: what dashboards and alert rules may reference. */
export function exportedPrometheusSeries(): Set<string> {
  return new Set(EXPORTED_METRICS.flatMap(prometheusSeries));
}
