import { parser } from '@prometheus-io/lezer-promql';
import { parse } from 'yaml';

/**
 * Offline checks of the Grafana dashboard and Prometheus rules in deploy/observability/
 * (docs/decisions/0260-telemetry-everywhere.md). Each returns violations (empty when fine).
 */

/** What parsing one PromQL expression gives: the metric names it selects, or where it fails. */
export interface ParsedExpr {
  metrics: string[];
  error?: string;
}

/** Parses `expr` with the PromQL grammar of Prometheus's own UI (lezer-promql): selected metric names, or the first error. */
export function parsePromql(expr: string): ParsedExpr {
  const metrics: string[] = [];
  let error: string | undefined;
  parser.parse(expr).iterate({
    enter: (node) => {
      if (node.type.isError && !error) error = `syntax error at ${node.from}: …${expr.slice(Math.max(0, node.from - 20), node.from + 10)}…`;
      if (node.name === 'Identifier' && node.node.parent?.name === 'VectorSelector') metrics.push(expr.slice(node.from, node.to));
    },
  });
  if (!expr.trim()) error = 'empty expression';
  return { metrics, error };
}

/** Every expression's violations: syntax errors and metric names the services do not export. */
export function exprViolations(where: string, expr: unknown, exported: ReadonlySet<string>): string[] {
  if (typeof expr !== 'string') return [`${where}: expr is not a string`];
  const parsed = parsePromql(expr);
  const out = parsed.error ? [`${where}: ${parsed.error}`] : [];
  if (!parsed.metrics.length) out.push(`${where}: selects no metric`);
  for (const m of parsed.metrics) if (!exported.has(m)) out.push(`${where}: ${m} is not a metric the services export`);
  return out;
}

type Panel = { type?: string; title?: string; targets?: Array<{ expr?: unknown }>; panels?: Panel[] };

/** Violations of a Grafana dashboard's JSON text: parses, has panels, each panel's targets are valid PromQL over exported metrics. */
export function dashboardViolations(text: string, exported: ReadonlySet<string>): string[] {
  let dash: { title?: unknown; uid?: unknown; panels?: Panel[] };
  try {
    dash = JSON.parse(text) as typeof dash;
  } catch (err) {
    return [`dashboard is not JSON: ${(err as Error).message}`];
  }
  const out: string[] = [];
  if (typeof dash.title !== 'string' || typeof dash.uid !== 'string') out.push('dashboard needs a title and a uid');
  const panels = (dash.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== 'row');
  if (!panels.length) out.push('dashboard has no panels');
  for (const p of panels) {
    if (!p.targets?.length) out.push(`panel "${p.title}": no targets`);
    for (const [i, t] of (p.targets ?? []).entries()) out.push(...exprViolations(`panel "${p.title}" target ${i}`, t.expr, exported));
  }
  return out;
}

/** A Prometheus rules file, as `rule_files` loads it. */
export interface RulesFile {
  groups: Array<{ name: string; rules: Array<Record<string, unknown>> }>;
}

const DURATION = /^([0-9]+(ms|s|m|h|d|w|y))+$/;

/** Violations of a Prometheus rules file's YAML text: the rule-group shape, and every expression valid over exported metrics. */
export function rulesViolations(text: string, exported: ReadonlySet<string>): string[] {
  let doc: RulesFile;
  try {
    doc = parse(text) as RulesFile;
  } catch (err) {
    return [`rules are not YAML: ${(err as Error).message}`];
  }
  if (!doc || !Array.isArray(doc.groups) || !doc.groups.length) return ['rules need a non-empty `groups` list'];
  const out: string[] = [];
  const names = new Set<string>();
  for (const g of doc.groups) {
    if (typeof g.name !== 'string' || !g.name) out.push('a group without a name');
    else if (names.has(g.name)) out.push(`group ${g.name} twice`);
    names.add(g.name);
    if (!Array.isArray(g.rules) || !g.rules.length) out.push(`group ${g.name}: no rules`);
    for (const r of g.rules ?? []) {
      const id = String(r.alert ?? r.record ?? '?');
      if (typeof r.alert !== 'string' && typeof r.record !== 'string') out.push(`group ${g.name}: a rule with neither alert nor record`);
      if (r.for !== undefined && !(typeof r.for === 'string' && DURATION.test(r.for))) out.push(`${id}: for is not a duration`);
      for (const key of ['labels', 'annotations'])
        if (r[key] !== undefined) {
          const map = r[key] as Record<string, unknown>;
          if (typeof map !== 'object' || Object.values(map).some((v) => typeof v !== 'string'))
            out.push(`${id}: ${key} must map to strings`);
        }
      const known = new Set(['alert', 'record', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations']);
      for (const key of Object.keys(r)) if (!known.has(key)) out.push(`${id}: unknown field ${key}`);
      out.push(...exprViolations(id, r.expr, exported));
    }
  }
  return out;
}

/** Metric names the alerting rules of `text` reference (for the coverage check). */
export function alertedMetrics(text: string): Set<string> {
  const doc = parse(text) as RulesFile;
  return new Set(
    doc.groups.flatMap((g) => g.rules.filter((r) => typeof r.alert === 'string').flatMap((r) => parsePromql(String(r.expr)).metrics)),
  );
}
