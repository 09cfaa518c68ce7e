import type { IncomingMessage } from 'node:http';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';

/** Probe paths polled by orchestrators: no span for each poll. */
const PROBES = /^\/(healthz|readyz)(\?|$)/;

/**
 * The auto-instrumentations every service runs (docs/product/design.md#observability): http (server spans for the APIs),
 * express (route names), pg and ioredis (queries and commands inside a traced job or request).
 * Settings that keep content out of spans and background noise out of traces:
 * - pg: statements only with their `$n` placeholders (`enhancedDatabaseReporting` off, so no
 *   values), no connect spans, and only inside a span — the outbox sweep, the audit chain writer
 *   and the monitors poll every few hundred ms and would otherwise start a trace per query;
 * - ioredis: only inside a span, and the statement is the command name alone — BullMQ adds jobs
 *   with EVALSHA, whose arguments are the job payload (tool results included);
 * - http: no spans for `/healthz` and `/readyz` polls, no outgoing span without a parent;
 * - express: request handlers and routers, not every middleware.
 */
export function createInstrumentations(): Instrumentation[] {
  return [
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (req: IncomingMessage) => PROBES.test(req.url ?? ''),
      requireParentforOutgoingSpans: true,
    }),
    new ExpressInstrumentation({ ignoreLayersType: [ExpressLayerType.MIDDLEWARE] }),
    new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false, ignoreConnectSpans: true }),
    new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command: string) => command }),
  ];
}

/** Modules whose ESM imports the loader hook must intercept for these instrumentations. */
export const INSTRUMENTED_MODULES = ['express', 'pg', 'pg-pool', 'ioredis', 'http', 'https', 'node:http', 'node:https'];

let registered: Instrumentation[] | undefined;

/** The instrumentations enabled in this process by {@link enableInstrumentations}, if any. */
export function enabledInstrumentations(): readonly Instrumentation[] {
  return registered ?? [];
}

/** Records the instrumentations a preload enabled, so the SDK can hand them its meter provider. */
export function rememberInstrumentations(list: Instrumentation[]): void {
  registered = list;
}
