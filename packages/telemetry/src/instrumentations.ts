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

/** Names of the auto-instrumentations, as `OTEL_NODE_ENABLED_INSTRUMENTATIONS` spells them (the package name after `instrumentation-`). */
export type InstrumentationName = 'undici' | 'runtime-node' | 'http' | 'express' | 'pg' | 'ioredis';

/** One auto-instrumentation: how to make it, and the modules the ESM loader hook must intercept for it. */
interface InstrumentationSpec {
  name: InstrumentationName;
  create: () => Instrumentation;
  hooks: readonly string[];
}

/**
 * Every auto-instrumentation a service can run (docs/product/design.md#observability), with the
 * settings that keep content out of spans and background noise out of traces:
 * - undici (Node's `fetch`: the `openai` client, every adapter and read of a system of record):
 *   a CLIENT span per request, only inside a span, carrying the W3C `traceparent` downstream, so
 *   staging and the model-stub continue the trace; its `http.client.request.duration`;
 * - runtime-node: event-loop delay and utilization, heap, GC durations (`nodejs.*`, `v8js.*`),
 *   sampled every {@link RUNTIME_PRECISION_MS};
 * - http: server spans for the APIs, no spans for `/healthz` and `/readyz` polls, no outgoing
 *   span without a parent;
 * - express: route names; request handlers and routers, not every middleware;
 * - pg: statements only with their `$n` placeholders (`enhancedDatabaseReporting` off, so no
 *   values), no connect spans, and only inside a span — the outbox sweep, the audit chain writer
 *   and the monitors poll every few hundred ms and would otherwise start a trace per query;
 * - ioredis: only inside a span, and the statement is the command name alone — BullMQ adds jobs
 *   with EVALSHA, whose arguments are the job payload (tool results included).
 * undici and runtime-node need no loader hook (diagnostics channels and perf_hooks).
 */
const SPECS: readonly InstrumentationSpec[] = [
  { name: 'undici', create: () => new UndiciInstrumentation({ requireParentforSpans: true }), hooks: [] },
  { name: 'runtime-node', create: () => new RuntimeNodeInstrumentation({ monitoringPrecision: RUNTIME_PRECISION_MS }), hooks: [] },
  {
    name: 'http',
    create: () =>
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req: IncomingMessage) => PROBES.test(req.url ?? ''),
        requireParentforOutgoingSpans: true,
      }),
    hooks: ['http', 'https', 'node:http', 'node:https'],
  },
  { name: 'express', create: () => new ExpressInstrumentation({ ignoreLayersType: [ExpressLayerType.MIDDLEWARE] }), hooks: ['express'] },
  {
    name: 'pg',
    create: () => new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false, ignoreConnectSpans: true }),
    hooks: ['pg', 'pg-pool'],
  },
  {
    name: 'ioredis',
    create: () => new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command: string) => command }),
    hooks: ['ioredis'],
  },
];

/** Every instrumentation name, in the order {@link createInstrumentations} enables them. */
export const INSTRUMENTATION_NAMES: readonly InstrumentationName[] = SPECS.map((s) => s.name);

/**
 * Parses one comma-separated list of instrumentation names as OpenTelemetry's Node
 * auto-instrumentation does: unset or empty means "not given"; blank entries are dropped; a
 * name this process does not run (a typo, or one of OpenTelemetry's others such as `fs`) is
 * ignored with a warning on stderr, so a setting shared with other Node services never stops one.
 */
function namesFrom(variable: string, env: Record<string, string | undefined>): Set<InstrumentationName> | undefined {
  const raw = env[variable];
  if (!raw) return undefined;
  const names = raw
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  const known = names.filter((n): n is InstrumentationName => (INSTRUMENTATION_NAMES as readonly string[]).includes(n));
  const unknown = names.filter((n) => !known.includes(n as InstrumentationName));
  if (unknown.length)
    process.stderr.write(
      `telemetry: ${variable} names ${unknown.join(', ')}, not run by Gatehouse (ignored); known: ${INSTRUMENTATION_NAMES.join(', ')}\n`,
    );
  return new Set(known);
}

/**
 * The instrumentations this process runs, chosen by the standard variables of OpenTelemetry's
 * Node auto-instrumentation: `OTEL_NODE_ENABLED_INSTRUMENTATIONS` (comma-separated names; unset
 * or empty: every one) minus `OTEL_NODE_DISABLED_INSTRUMENTATIONS`. Names not in
 * {@link INSTRUMENTATION_NAMES} are ignored with a warning. Some depend on others: express
 * records its route spans only inside http's server span, and http also extracts the incoming
 * `traceparent`; without runtime-node the event-loop metrics (and their alert) are gone.
 * `GATEHOUSE_TEST_DISABLE_FETCH_TRACING=1` also leaves undici out (the control-removed test only).
 * @throws Error when that test switch is set outside `GATEHOUSE_ENV=test`.
 */
export function selectedInstrumentations(env: Record<string, string | undefined> = process.env): InstrumentationName[] {
  const enabled = namesFrom('OTEL_NODE_ENABLED_INSTRUMENTATIONS', env);
  const disabled = namesFrom('OTEL_NODE_DISABLED_INSTRUMENTATIONS', env) ?? new Set();
  if (fetchTracingDisabled(env)) disabled.add('undici');
  return INSTRUMENTATION_NAMES.filter((n) => (!enabled || enabled.has(n)) && !disabled.has(n));
}

/**
 * New instances of the named instrumentations (default: {@link selectedInstrumentations} of
 * `process.env`), with the settings listed above. Each is enabled by its constructor (it
 * patches modules as they load).
 * @throws Error as {@link selectedInstrumentations} when `names` is left to its default.
 */
export function createInstrumentations(names: readonly InstrumentationName[] = selectedInstrumentations()): Instrumentation[] {
  return SPECS.filter((s) => names.includes(s.name)).map((s) => s.create());
}

/**
 * Modules whose ESM imports the loader hook must intercept for the named instrumentations
 * (default: {@link selectedInstrumentations} of `process.env`; none when only undici and
 * runtime-node run).
 * @throws Error as {@link selectedInstrumentations} when `names` is left to its default.
 */
export function instrumentedModules(names: readonly InstrumentationName[] = selectedInstrumentations()): string[] {
  return SPECS.filter((s) => names.includes(s.name)).flatMap((s) => s.hooks);
}

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_FETCH_TRACING=1` removes the fetch
 * instrumentation (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
export function fetchTracingDisabled(env: Record<string, string | undefined> = process.env): boolean {
  return testFaults(env).disableFetchTracing;
}

let registered: Instrumentation[] | undefined;

/** The instrumentations enabled in this process by {@link enableInstrumentations}, if any. */
export function enabledInstrumentations(): readonly Instrumentation[] {
  return registered ?? [];
}

/** Records the instrumentations a preload enabled, so the SDK can hand them its meter provider. */
export function rememberInstrumentations(list: Instrumentation[]): void {
  registered = list;
}
