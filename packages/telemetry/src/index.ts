import { fileURLToPath } from 'node:url';

export { startTelemetry, type Telemetry, type TelemetryOptions } from './sdk.ts';
export { exportConfigured } from './config.ts';
export { MetricsProbe, sumPoints, type ProbePoint } from './metrics-probe.ts';
export { currentTraceparent, withSpan, withJobSpan, logCorrelation } from './tracing.ts';
export { createInstrumentations, enabledInstrumentations, INSTRUMENTED_MODULES } from './instrumentations.ts';
export {
  METRICS,
  GAUGE_READ_TIMEOUT_MS,
  recordChainedAuditEvents,
  recordJob,
  recordAlert,
  observeQueueDepth,
  observeAuditBacklog,
  setMetricsRelease,
  type AuditMetricEvent,
} from './metrics.ts';

/** Absolute path of the preload that enables the auto-instrumentations (`node --import <path>`). */
export const TELEMETRY_PRELOAD = fileURLToPath(new URL('./register.ts', import.meta.url));
