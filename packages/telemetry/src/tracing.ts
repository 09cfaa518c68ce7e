import {
  context,
  isSpanContextValid,
  propagation,
  trace,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type Context,
  type Span,
} from '@opentelemetry/api';

const tracer = () => trace.getTracer('gatehouse');

/** W3C `traceparent` of the active span, to store with a job (trace context through queues). */
export function currentTraceparent(): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent;
}

/** `messaging.system` of every queue span: the queues are BullMQ's. */
export const MESSAGING_SYSTEM = 'bullmq';

/**
 * Attributes of a queue span in the OpenTelemetry messaging semantic conventions: the system
 * (`bullmq`), the destination (the full queue name, `executions.rel-1`), the operation type
 * (`send` for a producer, `process` for a consumer) and the message id (the job id).
 */
export function messagingAttributes(queue: string, jobId: string, operation: 'send' | 'process'): Record<string, string> {
  return {
    'messaging.system': MESSAGING_SYSTEM,
    'messaging.destination.name': queue,
    'messaging.operation.type': operation,
    'messaging.operation.name': operation,
    'messaging.message.id': jobId,
  };
}

async function inSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  parent: Context,
  fn: (span: Span) => Promise<T>,
  kind: SpanKind = SpanKind.INTERNAL,
): Promise<T> {
  return tracer().startActiveSpan(name, { attributes, kind }, parent, async (span) => {
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
 * Runs a queue job in a CONSUMER span parented only from `storedTraceparent`, the context stored
 * with that job when it was enqueued — never from whatever context the worker happens to run
 * in, so a redelivered job joins the trace of the workflow that enqueued it and nothing else. A
 * job stored without context starts a trace of its own. Pass {@link messagingAttributes}
 * (`process`) in `attributes`. Errors mark the span and are rethrown.
 */
export async function withJobSpan<T>(
  name: string,
  attributes: Record<string, string | number>,
  storedTraceparent: string | undefined,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = storedTraceparent ? propagation.extract(ROOT_CONTEXT, { traceparent: storedTraceparent }) : ROOT_CONTEXT;
  return inSpan(name, attributes, parent, fn, SpanKind.CONSUMER);
}

/**
 * Records the sending of one job as a PRODUCER span `send <queue>` (messaging conventions,
 * operation `send`) and returns the W3C `traceparent` of that span, to store with the job: the
 * consumer's span is then its child. The parent is `traceparent` when given (e.g. the context
 * an approval keeps), else the active span. With no valid parent there is no trace to continue:
 * no span, and `undefined` (the job's consumer then starts a trace of its own, ADR 0020). With
 * tracing off the parent's own `traceparent` comes back.
 */
export function producerTraceparent(queue: string, jobId: string, traceparent?: string): string | undefined {
  const parent = traceparent ? propagation.extract(ROOT_CONTEXT, { traceparent }) : context.active();
  const sc = trace.getSpanContext(parent);
  if (!sc || !isSpanContextValid(sc)) return undefined;
  const span = tracer().startSpan(
    `send ${queue}`,
    { kind: SpanKind.PRODUCER, attributes: messagingAttributes(queue, jobId, 'send') },
    parent,
  );
  span.end();
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(parent, span), carrier);
  return carrier.traceparent;
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
