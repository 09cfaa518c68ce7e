import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { exportedPrometheusSeries, METRICS, prometheusName } from '../../packages/telemetry/src/index.ts';
import { alertedMetrics, dashboardViolations, parsePromql, rulesViolations } from './observability-checks.ts';

// deploy/observability/ (docs/decisions/0260-telemetry-everywhere.md): the Grafana dashboard and
// the Prometheus alert rules parse, every expression is PromQL, and every metric an expression
// selects is one the services export — the set derived from the code's registry
// (packages/telemetry: METRICS and the instrumentations' metrics, asserted against the
// instruments in packages/telemetry/test/metric-registry.test.ts and test/telemetry/) under the
// collector's Prometheus naming. Each check is also shown to report a broken copy.

const read = (file: string): string => readFileSync(resolve(repoRoot, file), 'utf8');
const DASHBOARD = read('deploy/observability/grafana-dashboard.json');
const RULES = read('deploy/observability/prometheus-rules.yaml');
const exported = exportedPrometheusSeries();

/** Replaces `from` (which must occur) in `text`. */
function edit(text: string, from: string | RegExp, to: string): string {
  const next = text.replace(from, to);
  if (next === text) throw new Error(`${String(from)} not found`);
  return next;
}

describe('the exported metric names', () => {
  it('follow the collector: dots to underscores, the unit word, _total on counters, _ratio on unit-1 gauges', () => {
    expect(prometheusName(METRICS.failedUnknown)).toBe('gatehouse_executions_failed_unknown_total');
    expect(prometheusName(METRICS.auditBacklogAge)).toBe('gatehouse_audit_backlog_age_milliseconds');
    expect(prometheusName(METRICS.queueDepth)).toBe('gatehouse_queue_depth');
    expect(prometheusName({ name: 'nodejs.eventloop.utilization', kind: 'gauge', unit: '1' })).toBe('nodejs_eventloop_utilization_ratio');
    expect(prometheusName({ name: 'x.requests', kind: 'counter', unit: '{request}/s' })).toBe('x_requests_per_second_total');
    expect(exported).toContain('gatehouse_jobs_duration_milliseconds_bucket');
    expect(exported).not.toContain('gatehouse_jobs_duration_milliseconds');
  });
});

describe('deploy/observability/grafana-dashboard.json', () => {
  it('parses, has panels, and every target is PromQL over exported metrics', () => {
    expect(dashboardViolations(DASHBOARD, exported)).toEqual([]);
  });

  it('covers the runtime, model, dependency and lifecycle metrics', () => {
    const used = new Set(
      [...DASHBOARD.matchAll(/"expr": "((?:[^"\\]|\\.)*)"/g)].flatMap((m) => parsePromql(JSON.parse(`"${m[1]}"`) as string).metrics),
    );
    for (const m of [
      'nodejs_eventloop_delay_p99_seconds',
      'nodejs_eventloop_utilization_ratio',
      'v8js_memory_heap_used_bytes',
      'v8js_gc_duration_seconds_sum',
      'gatehouse_model_duration_milliseconds_bucket',
      'gatehouse_model_tokens_input_total',
      'gatehouse_model_tokens_output_total',
      'gatehouse_model_spend_micro_usd_total',
      'gatehouse_dependency_errors_total',
      'gatehouse_executions_failed_unknown_total',
      'gatehouse_queue_depth',
      'gatehouse_runs_stuck',
    ])
      expect(used, m).toContain(m);
  });

  const broken: Array<[string, (t: string) => string, string]> = [
    ['not JSON', (t) => t.slice(1), 'not JSON'],
    [
      'a metric the services do not export',
      (t) => edit(t, 'gatehouse_proposals_total', 'gatehouse_proposals'),
      'gatehouse_proposals is not',
    ],
    ['an OTel name instead of the Prometheus one', (t) => edit(t, 'gatehouse_runs_stuck', 'gatehouse.runs.stuck'), 'syntax error'],
    ['an unbalanced expression', (t) => edit(t, 'max(gatehouse_audit_backlog)', 'max(gatehouse_audit_backlog'), 'syntax error'],
  ];
  for (const [what, change, expected] of broken)
    it(`reports ${what}`, () => {
      expect(dashboardViolations(change(DASHBOARD), exported).join('\n')).toContain(expected);
    });
});

describe('deploy/observability/prometheus-rules.yaml', () => {
  it('parses as YAML in the rule-group shape; every expression is PromQL over exported metrics', () => {
    expect(rulesViolations(RULES, exported)).toEqual([]);
  });

  it('alerts on failed_unknown, audit backlog age, queue depth, stuck runs, invariant monitors and dependency errors', () => {
    const alerted = alertedMetrics(RULES);
    for (const m of [
      'gatehouse_executions_failed_unknown_total',
      'gatehouse_audit_backlog_age_milliseconds',
      'gatehouse_queue_depth',
      'gatehouse_runs_stuck',
      'gatehouse_monitor_alerts_total',
      'gatehouse_dependency_errors_total',
    ])
      expect(alerted, m).toContain(m);
  });

  const broken: Array<[string, (t: string) => string, string]> = [
    ['no groups', (t) => edit(t, 'groups:', 'grupos:'), 'groups'],
    [
      'a counter without _total',
      (t) => edit(t, 'gatehouse_monitor_alerts_total', 'gatehouse_monitor_alerts'),
      'gatehouse_monitor_alerts is not',
    ],
    ['a missing unit suffix', (t) => edit(t, 'gatehouse_audit_backlog_age_milliseconds', 'gatehouse_audit_backlog_age'), 'is not a metric'],
    ['a bad duration', (t) => edit(t, 'for: 2m', 'for: two minutes'), 'for is not a duration'],
    ['an invalid expression', (t) => edit(t, '> 0.2', '>> 0.2'), 'syntax error'],
    ['a misspelt field', (t) => edit(t, 'annotations:', 'anotations:'), 'unknown field anotations'],
  ];
  for (const [what, change, expected] of broken)
    it(`reports ${what}`, () => {
      expect(rulesViolations(change(RULES), exported).join('\n')).toContain(expected);
    });
});
