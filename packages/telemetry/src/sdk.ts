import { diag, metrics } from '@opentelemetry/api';
import { diagLogLevelFromString } from '@opentelemetry/core';
import { startNodeSdk } from '@opentelemetry/sdk-node';
import type { IMetricReader } from '@opentelemetry/sdk-metrics';
import type { SpanProcessor } from '@opentelemetry/sdk-trace';
import { exportConfigured } from './config.ts';
import { enabledInstrumentations } from './instrumentations.ts';
import { setMetricsRelease } from './metrics.ts';
import { quietDiagLogger } from './diag-logger.ts';

/** Handle of the started SDK. */
export interface Telemetry {
  /** Flushes and stops the SDK; resolves within the shutdown bound even if a collector hangs. */
  shutdown: () => Promise<void>;
}

/** Options of {@link startTelemetry}; tests pass in-memory processors and readers. */
export interface TelemetryOptions {
  spanProcessors?: SpanProcessor[];
  metricReaders?: IMetricReader[];
  /** Longest wait for the final flush on shutdown, ms (default 2000; `Infinity` waits for the exporters' own timeouts). */
  shutdownTimeoutMs?: number;
}

/**
 * Starts OpenTelemetry for one service process (`service.name`, `service.version` = release).
 * Exporters follow the standard environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`,
 * `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_SDK_DISABLED`); a signal with no endpoint or exporter
 * configured stays off (see {@link exportConfigured}). Logs are not exported through
 * OpenTelemetry: they are pino JSON on stdout carrying trace and span ids.
 *
 * Telemetry never fails or stalls work: spans and metrics are exported in the background by
 * batch processors and periodic readers with bounded queues (an unreachable collector drops
 * data, never blocks a job), and {@link Telemetry.shutdown} gives up after `shutdownTimeoutMs`.
 * The auto-instrumentations enabled by the preload (`register.ts`) get this SDK's meter provider.
 */
export function startTelemetry(service: string, release: string, opts: TelemetryOptions = {}): Telemetry {
  const logLevel = process.env.OTEL_LOG_LEVEL ?? 'warn';
  const sdk = startNodeSdk({
    logLevel,
    resourceDetectors: [],
    resourceAttributes: { 'service.name': service, 'service.version': release, 'gatehouse.release': release },
    spanProcessors: opts.spanProcessors ?? (exportConfigured('traces') ? undefined : []),
    metricReaders: opts.metricReaders ?? (exportConfigured('metrics') ? undefined : []),
    logRecordProcessors: [],
  });
  // The SDK installed a console logger; repeated export errors must not flood the log.
  diag.setLogger(quietDiagLogger(service), { logLevel: diagLogLevelFromString(logLevel), suppressOverrideMessage: true });
  setMetricsRelease(release);
  for (const instrumentation of enabledInstrumentations()) instrumentation.setMeterProvider(metrics.getMeterProvider());
  const boundMs = opts.shutdownTimeoutMs ?? 2000;
  return {
    shutdown: async () => {
      const flushed = sdk.shutdown().catch(() => undefined);
      if (!Number.isFinite(boundMs)) return flushed; // unbounded: only for the control-removed test
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        flushed,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, boundMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    },
  };
}
