import type { IncomingMessage } from 'node:http';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { RuntimeNodeInstrumentation } from '@opentelemetry/instrumentation-runtime-node';
import { testFaults } from '@gatehouse/contracts';

/** Event-loop delay histogram resolution of the runtime metrics, ms (the library's default). */
export const RUNTIME_PRECISION_MS = 10;

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
 * - express: request handlers and routers, not every middleware;
 * - undici (Node's `fetch`: the `openai` client, every adapter and read of a system of record):
 *   a CLIENT span per request, only inside a span, carrying the W3C `traceparent` downstream, so
 *   staging and the model-stub continue the trace; its `http.client.request.duration`;
 * - runtime-node: event-loop delay and utilization, heap, GC durations (`nodejs.*`, `v8js.*`),
 *   sampled every {@link RUNTIME_PRECISION_MS}.
 * undici and runtime-node need no loader hook (diagnostics channels and perf_hooks).
 * `GATEHOUSE_TEST_DISABLE_FETCH_TRACING=1` leaves undici out (the control-removed test only).
 * @throws Error when that switch is set outside `GATEHOUSE_ENV=test`.
 */
export function createInstrumentations(env: Record<string, string | undefined> = process.env): Instrumentation[] {
  return [
    ...(fetchTracingDisabled(env) ? [] : [new UndiciInstrumentation({ requireParentforSpans: true })]),
    new RuntimeNodeInstrumentation({ monitoringPrecision: RUNTIME_PRECISION_MS }),
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (req: IncomingMessage) => PROBES.test(req.url ?? ''),
      requireParentforOutgoingSpans: true,
    }),
    new ExpressInstrumentation({ ignoreLayersType: [ExpressLayerType.MIDDLEWARE] }),
    new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false, ignoreConnectSpans: true }),
    new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command: string) => command }),
  ];
}

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_FETCH_TRACING=1` removes the fetch
 * instrumentation (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
export function fetchTracingDisabled(env: Record<string, string | undefined> = process.env): boolean {
  return testFaults(env).disableFetchTracing;
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
