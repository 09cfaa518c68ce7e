import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MetricData } from '@opentelemetry/sdk-metrics';
import {
  GAUGE_READ_TIMEOUT_MS,
  METRICS,
  MetricsProbe,
  observeAuditBacklog,
  observeQueueDepth,
  recordAlert,
  recordChainedAuditEvents,
  recordJob,
  startTelemetry,
  type AuditMetricEvent,
  type Telemetry,
} from '../src/index.ts';

// The metrics of docs/product/design.md#observability over the real recording path: the SDK started as a service starts it, with an
// in-memory (pull) reader in place of the OTLP exporter.

const reader = new MetricsProbe();
let telemetry: Telemetry;

beforeAll(() => {
  telemetry = startTelemetry('test-service', 'rel-t', { spanProcessors: [], metricReaders: [reader] });
});
afterAll(async () => {
  await telemetry.shutdown();
});

async function collect(): Promise<MetricData[]> {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics);
}

type Point = { attributes: Record<string, unknown>; value: unknown };
function points(all: MetricData[], name: string): Point[] {
  return (all.find((m) => m.descriptor.name === name)?.dataPoints ?? []) as Point[];
}
/** Sum of a counter's points whose attributes include `match`. */
function total(all: MetricData[], name: string, match: Record<string, string> = {}): number {
  return points(all, name)
    .filter((p) => Object.entries(match).every(([k, v]) => p.attributes[k] === v))
    .reduce((n, p) => n + Number(p.value), 0);
}

const rev = { policy: 'support-p1', release: 'rel-1' };
const RUN = '6a0e5e2c-0000-4000-8000-000000000001';
/** The audit events of a T-1-like run: lookup, a refund and a reship approved and executed, then a stop. */
const flow: AuditMetricEvent[] = [
  { type: 'run.started', service: 'agent-loop', revisions: rev },
  { type: 'proposal.received', service: 'agent-loop', tool: 'lookup_order', revisions: rev },
  { type: 'policy.decision', service: 'policy-gateway', tool: 'lookup_order', decision: 'ALLOW', ruleId: 'R1', revisions: rev },
  { type: 'operation.claimed', service: 'executor', tool: 'lookup_order', revisions: rev },
  { type: 'operation.succeeded', service: 'executor', tool: 'lookup_order', outcome: 'succeeded', latencyMs: 12, revisions: rev },
  { type: 'proposal.received', service: 'agent-loop', tool: 'issue_refund', revisions: rev },
  { type: 'policy.decision', service: 'policy-gateway', tool: 'issue_refund', decision: 'REQUIRE_APPROVAL', ruleId: 'R7', revisions: rev },
  { type: 'approval.requested', service: 'approval', tool: 'issue_refund', ruleId: 'R7', revisions: rev },
  { type: 'approval.decided', service: 'approval', tool: 'issue_refund', decision: 'approved', revisions: rev },
  { type: 'approval.consumed', service: 'executor', tool: 'issue_refund', revisions: rev },
  { type: 'operation.claimed', service: 'executor', tool: 'issue_refund', revisions: rev },
  {
    type: 'operation.unknown',
    service: 'executor',
    tool: 'issue_refund',
    outcome: 'timeout after 15000 ms',
    latencyMs: 15000,
    revisions: rev,
  },
  { type: 'proposal.received', service: 'agent-loop', tool: 'issue_refund', revisions: rev },
  { type: 'policy.decision', service: 'policy-gateway', tool: 'issue_refund', decision: 'DENY', ruleId: 'R2', revisions: rev },
  {
    type: 'policy.decision',
    service: 'executor',
    tool: 'reship_order',
    decision: 'DENY',
    ruleId: 'R4',
    outcome: 'reevaluated_v2',
    revisions: rev,
  },
  { type: 'approval.requested', service: 'approval', tool: 'reship_order', ruleId: 'R9', revisions: rev },
  { type: 'approval.decided', service: 'approval', tool: 'reship_order', decision: 'denied', revisions: rev },
  { type: 'approval.requested', service: 'approval', tool: 'reship_order', ruleId: 'R9', revisions: rev },
  { type: 'approval.decided', service: 'approval', tool: 'reship_order', outcome: 'expired', revisions: rev },
  { type: 'operation.failed', service: 'executor', tool: 'issue_refund', outcome: 'idempotency_conflict', revisions: rev },
  { type: 'proposal.invalid', service: 'policy-gateway', tool: 'unknown_tool', outcome: 'unknown_tool', revisions: rev },
  { type: 'run.stopped', service: 'agent-loop', outcome: 'budget_exhausted', revisions: { release: 'rel-1' } },
  { type: 'run.redriven', service: 'executor', outcome: 'executions:missing', revisions: { release: 'rel-1' } },
  { type: 'run.redriven', service: 'executor', outcome: 'turns:failed', revisions: { release: 'rel-1' } },
];

describe('metrics from the audit events entering the chain', () => {
  it('counts proposals, decisions, denials by rule, approvals, attempts, outcomes, failed_unknown, conflicts, budget stops and watchdog re-drives', async () => {
    const now = Date.now();
    recordChainedAuditEvents(
      flow.map((event, i) => ({ event, outboxCreatedAtMs: now - 40 - i })),
      now,
    );
    const m = await collect();
    expect(total(m, METRICS.proposals.name)).toBe(3);
    expect(total(m, METRICS.proposals.name, { tool: 'issue_refund', release: 'rel-1' })).toBe(2);
    expect(total(m, METRICS.decisions.name, { decision: 'ALLOW', rule: 'R1', policy_revision: 'support-p1' })).toBe(1);
    expect(total(m, METRICS.decisions.name, { decision: 'INVALID' })).toBe(1);
    expect(total(m, METRICS.denials.name, { tool: 'issue_refund', rule: 'R2', stage: 'proposal' })).toBe(1);
    expect(total(m, METRICS.denials.name, { tool: 'reship_order', rule: 'R4', stage: 'execution' })).toBe(1);
    expect(total(m, METRICS.approvals.name, { outcome: 'requested' })).toBe(3);
    expect(total(m, METRICS.approvals.name, { outcome: 'requested', rule: 'R9' })).toBe(2);
    expect(total(m, METRICS.approvals.name, { outcome: 'granted' })).toBe(1);
    expect(total(m, METRICS.approvals.name, { outcome: 'denied' })).toBe(1);
    expect(total(m, METRICS.approvals.name, { outcome: 'expired' })).toBe(1);
    expect(total(m, METRICS.approvals.name, { outcome: 'consumed' })).toBe(1);
    expect(total(m, METRICS.attempts.name)).toBe(2);
    expect(total(m, METRICS.outcomes.name, { tool: 'lookup_order', outcome: 'succeeded' })).toBe(1);
    expect(total(m, METRICS.outcomes.name, { tool: 'issue_refund', outcome: 'unknown' })).toBe(1);
    expect(total(m, METRICS.failedUnknown.name, { tool: 'issue_refund' })).toBe(1);
    expect(total(m, METRICS.idempotencyConflicts.name, { tool: 'issue_refund' })).toBe(1);
    expect(total(m, METRICS.stops.name, { reason: 'budget_exhausted' })).toBe(1);
    expect(total(m, METRICS.budgetStops.name, { release: 'rel-1' })).toBe(1);
    expect(total(m, METRICS.runs.name, { outcome: 'started' })).toBe(1);
    expect(total(m, METRICS.redrives.name)).toBe(2);
    expect(total(m, METRICS.redrives.name, { queue: 'executions', reason: 'missing', release: 'rel-1' })).toBe(1);

    const duration = points(m, METRICS.executionDuration.name);
    expect(duration.map((p) => (p.value as { count: number }).count).reduce((a, b) => a + b, 0)).toBe(2);
    const lag = points(m, METRICS.auditLag.name).map((p) => p.value as { count: number; min: number; max: number });
    expect(lag.reduce((n, v) => n + v.count, 0)).toBe(flow.length);
    expect(Math.min(...lag.map((v) => v.min))).toBeGreaterThanOrEqual(40);
  });

  it('labels are low-cardinality: no ids or free text, and unknown shapes read "other"', async () => {
    recordChainedAuditEvents([
      { event: { type: 'run.stopped', service: 'agent-loop', outcome: 'a reason with spaces: not from the enum' } },
      { event: { type: 'operation.failed', service: 'executor', tool: 'issue_refund', outcome: 'http 500: internal error at payments' } },
      { event: { type: 'proposal.received', service: 'agent-loop', tool: 'x'.repeat(200) } },
    ]);
    const m = await collect();
    // The keys docs/decisions/0040-metrics.md allows for lifecycle counters (queue: the watchdog's re-drives).
    const allowedKeys = new Set([
      'tool',
      'outcome',
      'rule',
      'decision',
      'stage',
      'reason',
      'release',
      'policy_revision',
      'service',
      'queue',
    ]);
    const gatehouse = m.filter((x) => x.descriptor.name.startsWith('gatehouse.'));
    for (const metric of gatehouse)
      for (const p of metric.dataPoints as Point[]) {
        for (const [k, v] of Object.entries(p.attributes)) {
          expect(allowedKeys, `${metric.descriptor.name} label ${k}`).toContain(k);
          expect(String(v)).toMatch(/^[A-Za-z0-9_.:-]{1,64}$/);
          expect(String(v)).not.toContain(RUN.slice(0, 8));
        }
      }
    expect(total(m, METRICS.stops.name, { reason: 'other' })).toBe(1);
    // Cumulative: the flow above had one failed refund (the idempotency conflict) already.
    expect(total(m, METRICS.outcomes.name, { tool: 'issue_refund', outcome: 'failed' })).toBe(2);
    expect(total(m, METRICS.proposals.name, { tool: 'other' })).toBe(1);
  });

  it('a label key takes at most 64 distinct values; more read "other"', async () => {
    for (let i = 0; i < 100; i++) recordAlert(`monitor_${i}`);
    const alerts = points(await collect(), METRICS.alerts.name);
    expect(alerts.length).toBe(65);
    expect(alerts.find((p) => p.attributes.monitor === 'other')?.value).toBe(36);
  });

  it('malformed events are dropped without throwing', () => {
    expect(() => recordChainedAuditEvents([{ event: null as unknown as AuditMetricEvent }])).not.toThrow();
  });
});

describe('process metrics', () => {
  it('job durations by queue and outcome carry the process release', async () => {
    recordJob('executions', 'completed', 42);
    recordJob('executions', 'failed', 7);
    const jobs = points(await collect(), METRICS.jobDuration.name);
    expect(jobs.map((p) => p.attributes).sort((a, b) => String(a.outcome).localeCompare(String(b.outcome)))).toEqual([
      { queue: 'executions', outcome: 'completed', release: 'rel-t' },
      { queue: 'executions', outcome: 'failed', release: 'rel-t' },
    ]);
  });

  it('observable gauges: queue depth and audit backlog are read at collection', async () => {
    observeQueueDepth(async () => [
      { queue: 'executions', state: 'waiting', count: 3 },
      { queue: 'executions', state: 'failed', count: 1 },
    ]);
    observeAuditBacklog(async () => ({ events: 5, oldestAgeMs: 1500 }));
    const m = await collect();
    expect(points(m, METRICS.queueDepth.name)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ attributes: { queue: 'executions', state: 'waiting', release: 'rel-t' }, value: 3 }),
        expect.objectContaining({ attributes: { queue: 'executions', state: 'failed', release: 'rel-t' }, value: 1 }),
      ]),
    );
    expect(points(m, METRICS.auditBacklog.name)[0]?.value).toBe(5);
    expect(points(m, METRICS.auditBacklogAge.name)[0]?.value).toBe(1500);
  });

  // Last in the file: the gauges registered here stay registered.
  it('a gauge whose source hangs or throws reports nothing; the collection and the other metrics go on', async () => {
    observeQueueDepth(() => new Promise(() => {}));
    observeAuditBacklog(() => Promise.reject(new Error('database unreachable')));
    recordJob('turns', 'completed', 5);
    const started = Date.now();
    const { resourceMetrics } = await reader.collect();
    expect(Date.now() - started).toBeLessThan(GAUGE_READ_TIMEOUT_MS + 3000);
    const names = resourceMetrics.scopeMetrics.flatMap((sm) => sm.metrics.map((x) => x.descriptor.name));
    expect(names).toContain(METRICS.jobDuration.name);
  });
});
