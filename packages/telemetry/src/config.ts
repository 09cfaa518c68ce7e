/**
 * Whether a signal is exported, read from the standard OpenTelemetry environment: an OTLP
 * endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or the per-signal `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`)
 * or an explicit exporter (`OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER`, other than `none`).
 * `OTEL_SDK_DISABLED=true` turns everything off. With nothing configured a laptop without a
 * collector exports nothing and logs no export errors.
 */
export function exportConfigured(signal: 'traces' | 'metrics', env: Record<string, string | undefined> = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporter = env[signal === 'traces' ? 'OTEL_TRACES_EXPORTER' : 'OTEL_METRICS_EXPORTER']?.trim();
  if (exporter) return exporter !== 'none';
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env[`OTEL_EXPORTER_OTLP_${signal.toUpperCase()}_ENDPOINT`]);
}
