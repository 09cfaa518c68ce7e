import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MetricData } from '@opentelemetry/sdk-metrics';
import {
  dependencyRoutes,
  GATEHOUSE_METRICS,
  METRICS,
  MetricsProbe,
  observeAuditBacklog,
  observeDependencyErrors,
  observeQueueDepth,
  observeStuckRuns,
  recordAlert,
  recordChainedAuditEvents,
  recordDependencyError,
  recordJob,
  recordLimitRecheck,
  recordModelCall,
  startTelemetry,
  sumPoints,
  type AuditMetricEvent,
  type ProbePoint,
  type Telemetry,
} from '../src/index.ts';

// docs/decisions/0260-telemetry-everywhere.md: the registry of metric names (METRICS, from which
// the deploy checks derive the Prometheus names dashboards and alerts may use) is what the
// recording functions create — same names, instrument kinds and units — and the model and
// dependency-error metrics count what they say.

const probe = new MetricsProbe();
let telemetry: Telemetry;
let server: Server;
let base = '';

beforeAll(async () => {
  telemetry = startTelemetry('registry-test', 'rel-t', { spanProcessors: [], metricReaders: [probe] });
  // A system of record that fails: 503 on payments, 429 on orders, 200 elsewhere.
  server = createServer((req, res) => {
    if (req.url?.startsWith('/changes')) return void setTimeout(() => res.end('{}'), 300);
    res.statusCode = req.url?.startsWith('/ledger') ? 503 : req.url?.startsWith('/orders') ? 429 : 200;
    res.end('{}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  await telemetry.shutdown();
});

async function collect(): Promise<MetricData[]> {
  const { resourceMetrics, errors } = await probe.collect();
  expect(errors).toEqual([]);
  return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics);
}
const kindOf = (m: MetricData): string =>
  m.dataPointType === 0 ? 'histogram' : m.dataPointType === 2 ? 'gauge' : 'isMonotonic' in m && m.isMonotonic ? 'counter' : 'updowncounter';

describe('the metric registry', () => {
  it('every recording function creates exactly the instruments the registry lists (name, kind, unit)', async () => {
    const types = [
      'proposal.received',
      'proposal.invalid',
      'policy.decision',
      'approval.requested',
      'approval.decided',
      'operation.claimed',
      'operation.unknown',
      'run.redriven',
      'run.stopped',
    ];
    const events: AuditMetricEvent[] = types.map((type) => ({ type, service: 'executor', tool: 'issue_refund', decision: 'DENY' }));
    events.push({ type: 'operation.failed', service: 'executor', tool: 'issue_refund', outcome: 'idempotency_conflict', latencyMs: 3 });
    events.push({ type: 'run.stopped', service: 'agent-loop', outcome: 'budget_exhausted' });
    recordChainedAuditEvents(events.map((event) => ({ event, outboxCreatedAtMs: Date.now() - 5 })));
    recordJob('executions', 'completed', 4);
    recordAlert('refund_ceiling');
    observeQueueDepth(async () => [{ queue: 'executions', state: 'waiting', count: 1 }]);
    observeAuditBacklog(async () => ({ events: 0, oldestAgeMs: 0 }));
    observeStuckRuns(async () => ['executing', 'executing', 'planning']);
    recordModelCall({ model: 'gpt-test', outcome: 'ok', durationMs: 120, inputTokens: 1000, outputTokens: 200, spendMicroUsd: 450 });
    recordDependencyError('redis', 'connection');
    recordLimitRecheck('decision', 'issue_refund');

    const created = (await collect()).filter((m) => m.descriptor.name.startsWith('gatehouse.'));
    const seen = Object.fromEntries(created.map((m) => [m.descriptor.name, { kind: kindOf(m), unit: m.descriptor.unit }]));
    const listed = Object.fromEntries(GATEHOUSE_METRICS.map((d) => [d.name, { kind: d.kind, unit: d.unit }]));
    expect(seen).toEqual(listed);
  });

  it('stuck runs are counted by state at collection', async () => {
    const points = (await probe.read()).get(METRICS.stuckRuns.name) ?? [];
    expect(points.map((p) => [p.attributes.state, p.value])).toEqual(
      expect.arrayContaining([
        ['executing', 2],
        ['planning', 1],
      ]),
    );
  });

  it('model requests: latency by model, release and outcome; input and output tokens and spend in micro-USD', async () => {
    recordModelCall({ model: 'gpt-test', outcome: 'unavailable', durationMs: 30_000 });
    const m = await probe.read();
    const duration = m.get(METRICS.modelDuration.name) ?? [];
    expect(duration.map((p) => p.attributes)).toEqual(
      expect.arrayContaining([
        { model: 'gpt-test', release: 'rel-t', outcome: 'ok' },
        { model: 'gpt-test', release: 'rel-t', outcome: 'unavailable' },
      ]),
    );
    expect((duration.find((p) => p.attributes.outcome === 'ok')?.value as { sum: number }).sum).toBe(120);
    expect(sumPoints(m.get(METRICS.modelInputTokens.name) ?? [], { model: 'gpt-test' })).toBe(1000);
    expect(sumPoints(m.get(METRICS.modelOutputTokens.name) ?? [])).toBe(200);
    expect(sumPoints(m.get(METRICS.modelSpend.name) ?? [], { release: 'rel-t' })).toBe(450);
    // Low-cardinality labels only: model and release on the counters.
    for (const p of m.get(METRICS.modelSpend.name) as ProbePoint[]) expect(Object.keys(p.attributes).sort()).toEqual(['model', 'release']);
  });

  it('dependency errors of fetch by dependency and kind: 5xx, 429, refused; other URLs and answers are not counted', async () => {
    // A port nobody listens on (a server closed again) for the model.
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const model = `http://127.0.0.1:${(closed.address() as { port: number }).port}/v1`;
    await new Promise((r) => closed.close(r));
    observeDependencyErrors(dependencyRoutes(base, [model]));
    await (await fetch(`${base}/ledger/refunds`, { method: 'POST' })).text();
    await (await fetch(`${base}/orders/O-1`)).text();
    await (await fetch(`${base}/mail/messages`)).text(); // 200: not an error
    await (await fetch(`${base}/faults`)).text(); // no dependency of this route
    await fetch(`${model}/responses`, { method: 'POST' }).catch(() => undefined); // the model, refused
    await fetch(`${base}/changes/CHG-1`, { signal: AbortSignal.timeout(50) }).catch(() => undefined);
    const points = (await probe.read()).get(METRICS.dependencyErrors.name) ?? [];
    expect(sumPoints(points, { dependency: 'payments', kind: 'http_5xx' })).toBe(1);
    expect(sumPoints(points, { dependency: 'orders', kind: 'throttled' })).toBe(1);
    expect(sumPoints(points, { dependency: 'model', kind: 'refused' })).toBe(1);
    expect(sumPoints(points, { dependency: 'changes', kind: 'timeout' })).toBe(1);
    expect(sumPoints(points, { dependency: 'mail' })).toBe(0);
    expect(sumPoints(points, { dependency: 'redis', kind: 'connection' })).toBe(1);
    expect(new Set(points.map((p) => Object.keys(p.attributes).sort().join(',')))).toEqual(new Set(['dependency,kind']));
  });
});
