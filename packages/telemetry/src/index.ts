import { context, propagation, trace, SpanStatusCode, type Span } from '@opentelemetry/api';
import { startNodeSdk } from '@opentelemetry/sdk-node';
import type { SpanProcessor } from '@opentelemetry/sdk-trace';

/** Handle of the started SDK. */
export interface Telemetry {
  shutdown: () => Promise<void>;
}

/**
 * Starts OpenTelemetry for one service process (`service.name`, `service.version` = release).
 * Exporters follow the standard environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_TRACES_EXPORTER`, `OTEL_SDK_DISABLED`); with no endpoint configured and no
 * `spanProcessors` given, tracing stays off so a laptop without a collector logs no export
 * errors. Tests pass their own processors (e.g. an in-memory exporter).
 */
export function startTelemetry(service: string, release: string, opts: { spanProcessors?: SpanProcessor[] } = {}): Telemetry {
  const exporting = Boolean(process.env.OTEL_EXPORTER_OTLP_ENDPOINT || process.env.OTEL_TRACES_EXPORTER);
  const sdk = startNodeSdk({
    logLevel: process.env.OTEL_LOG_LEVEL ?? 'warn',
    resourceDetectors: [],
    resourceAttributes: { 'service.name': service, 'service.version': release, 'gatehouse.release': release },
    ...(opts.spanProcessors ? { spanProcessors: opts.spanProcessors } : exporting ? {} : { spanProcessors: [] }),
  });
  return { shutdown: () => sdk.shutdown() };
}

const tracer = () => trace.getTracer('gatehouse');

/** W3C `traceparent` of the active span, to store with a job (trace context through queues). */
export function currentTraceparent(): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent;
}

/**
 * Runs `fn` in a span named `name`, parented from `traceparent` when given (the context stored
 * with a job), else from the active context. Errors mark the span and are rethrown.
 */
export async function withSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  fn: (span: Span) => Promise<T>,
  traceparent?: string,
): Promise<T> {
  const parent = traceparent ? propagation.extract(context.active(), { traceparent }) : context.active();
  return tracer().startActiveSpan(name, { attributes }, parent, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}
