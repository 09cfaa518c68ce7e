import { context, isSpanContextValid, propagation, trace, ROOT_CONTEXT, SpanStatusCode, type Context, type Span } from '@opentelemetry/api';

const tracer = () => trace.getTracer('gatehouse');

/** W3C `traceparent` of the active span, to store with a job (trace context through queues). */
export function currentTraceparent(): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent;
}

async function inSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  parent: Context,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
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

/**
 * Runs `fn` in a span named `name`, parented from `traceparent` when given (e.g. the context an
 * approval keeps), else from the active context (e.g. the HTTP request being served). Errors
 * mark the span and are rethrown.
 */
export async function withSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  fn: (span: Span) => Promise<T>,
  traceparent?: string,
): Promise<T> {
  const parent = traceparent ? propagation.extract(context.active(), { traceparent }) : context.active();
  return inSpan(name, attributes, parent, fn);
}

/**
 * Runs a queue job in a span parented only from `storedTraceparent`, the context stored with
 * that job when it was enqueued — never from whatever context the worker happens to run in, so
 * a redelivered job joins the trace of the workflow that enqueued it and nothing else. A job
 * stored without context starts a trace of its own. Errors mark the span and are rethrown.
 */
export async function withJobSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  storedTraceparent: string | undefined,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = storedTraceparent ? propagation.extract(ROOT_CONTEXT, { traceparent: storedTraceparent }) : ROOT_CONTEXT;
  return inSpan(name, attributes, parent, fn);
}

/**
 * Trace correlation fields for a log line: `{trace_id, span_id, trace_flags}` of the active
 * span (W3C hex ids), or `{}` outside a span or with tracing off. Used as the pino mixin.
 */
export function logCorrelation(): { trace_id?: string; span_id?: string; trace_flags?: string } {
  const sc = trace.getSpanContext(context.active());
  if (!sc || !isSpanContextValid(sc)) return {};
  return { trace_id: sc.traceId, span_id: sc.spanId, trace_flags: `0${sc.traceFlags.toString(16)}`.slice(-2) };
}
