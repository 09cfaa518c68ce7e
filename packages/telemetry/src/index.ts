import { fileURLToPath } from 'node:url';

export { startTelemetry, type Telemetry, type TelemetryOptions } from './sdk.ts';
export { exportConfigured } from './config.ts';
export { MetricsProbe, sumPoints, type ProbePoint } from './metrics-probe.ts';
export {
  currentTraceparent,
  withSpan,
  withJobSpan,
  logCorrelation,
  producerTraceparent,
  messagingAttributes,
  MESSAGING_SYSTEM,
} from './tracing.ts';
export {
  createInstrumentations,
  enabledInstrumentations,
  INSTRUMENTATION_NAMES,
  instrumentedModules,
  selectedInstrumentations,
  type InstrumentationName,
} from './instrumentations.ts';
export {
  METRICS,
  GAUGE_READ_TIMEOUT_MS,
  recordChainedAuditEvents,
  recordJob,
  recordAlert,
  observeQueueDepth,
  observeAuditBacklog,
  observeStuckRuns,
  setMetricsRelease,
  recordModelCall,
  recordDependencyError,
  recordLimitRecheck,
  DEPENDENCIES,
  DEPENDENCY_ERROR_KINDS,
  type AuditMetricEvent,
  type ModelCall,
  type ModelOutcome,
  type DependencyName,
  type DependencyErrorKind,
} from './metrics.ts';
export { observeDependencyErrors, dependencyRoutes, type DependencyRoute } from './dependency-errors.ts';
export {
  EXPORTED_METRICS,
  GATEHOUSE_METRICS,
  INSTRUMENTATION_METRICS,
  prometheusName,
  prometheusSeries,
  exportedPrometheusSeries,
  type MetricDef,
  type MetricKind,
} from './prometheus-names.ts';

/** Absolute path of the preload that enables the auto-instrumentations (`node --import <path>`). */
export const TELEMETRY_PRELOAD = fileURLToPath(new URL('./register.ts', import.meta.url));
