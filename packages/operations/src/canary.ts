import { sql } from 'kysely';
import { DEFAULT_CANARY_THRESHOLDS, loadReleaseManifest, PolicyDenied, STOP_REASONS, type CanaryThresholds } from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, TERMINAL_STATES, type Db, type Trx } from '@gatehouse/ledger';
import { consumeOverride, overrideDigest, requestOverride, type OverrideTicket } from './overrides.ts';

/** Stop reasons that count as errors of the runtime, not outcomes of policy (docs/product/states.md#stop-reasons). */
export const ERROR_STOP_REASONS: readonly (typeof STOP_REASONS)[number][] = [
  'step_failed',
  'dependency_unavailable',
  'audit_unavailable',
  'model_error',
];

/** What one release's runs did in a window (workflows created in it). Rates are per run. */
export interface ReleaseMeasures {
  release: string;
  runs: number;
  /** Runs in a terminal state (completed, stopped, needs_reconciliation). */
  terminal: number;
  /** Share of terminal runs that completed (0–1; null without terminal runs). */
  taskSuccess: number | null;
  /** Denied actions plus invalid proposals, per run. */
  unsafePerRun: number | null;
  /** Share of terminal runs stopped by an error ({@link ERROR_STOP_REASONS}). */
  errorRate: number | null;
  /** Operations ending failed_unknown, per run. */
  failedUnknownPerRun: number | null;
  /** 95th percentile of the time from intake to a terminal state, seconds. */
  p95TerminalSeconds: number | null;
  /** Mean model spend per run, micro-USD. */
  costPerRunMicroUsd: number | null;
}

/** One row of the analysis table. */
export interface CanaryRow {
  measure: 'task_success' | 'unsafe_per_run' | 'p95_terminal_s' | 'error_rate' | 'failed_unknown_per_run' | 'cost_per_run_musd';
  baseline: number | null;
  candidate: number | null;
  /** The threshold as printed (e.g. `≥ baseline − 0.05`). */
  limit: string;
  /** Safety measures have no tolerance. */
  safety: boolean;
  ok: boolean;
}

/** `gatehouse release analyze`: the candidate's cohort against the baseline over one window. */
export interface CanaryAnalysis {
  candidate: string;
  baseline: string;
  sinceMs: number;
  untilMs: number;
  thresholds: CanaryThresholds;
  measures: { baseline: ReleaseMeasures; candidate: ReleaseMeasures };
  rows: CanaryRow[];
  verdict: 'pass' | 'fail' | 'insufficient';
  /** What an override covers: `baseline:<id>` and the failing measures (or `insufficient`). */
  failureItems: string[];
  /** sha256 over candidate, its manifest, baseline and the failing measures: what an override is bound to. */
  failureDigest: string;
}

/** A release command refused by its canary analysis; `analysis` says why. */
export class CanaryRefused extends PolicyDenied {
  readonly analysis: CanaryAnalysis;
  constructor(analysis: CanaryAnalysis) {
    super(
      'canary_analysis',
      `release ${analysis.candidate}: canary analysis ${analysis.verdict} against ${analysis.baseline} — ` +
        `failing: ${failing(analysis).join(', ') || `fewer than ${analysis.thresholds.minRuns} terminal runs`}; ` +
        `a policy owner or another operator may approve an override: gatehouse release override ${analysis.candidate} --reason "<why>"`,
    );
    this.analysis = analysis;
  }
}

const rate = (n: number, d: number): number | null => (d > 0 ? n / d : null);

/**
 * Measures the workflows of `release` created in [sinceMs, untilMs) from the ledger.
 * @returns counts and rates as {@link ReleaseMeasures}.
 */
export async function measureRelease(db: Db | Trx, release: string, sinceMs: number, untilMs: number): Promise<ReleaseMeasures> {
  const since = new Date(sinceMs);
  const until = new Date(untilMs);
  const row = await sql<{
    runs: string;
    terminal: string;
    completed: string;
    errors: string;
    p95: number | null;
    cost: number | null;
    unsafe: string;
    unknown: string;
  }>`
    with w as (
      select w.id, w.state, w.stop_reason, w.created_at, w.updated_at, b.spend_micro_usd
        from workflows w left join budgets b on b.workflow_id = w.id
       where w.release_id = ${release} and w.created_at >= ${since} and w.created_at < ${until})
    select count(*) as runs,
           count(*) filter (where state in (${sql.join([...TERMINAL_STATES])})) as terminal,
           count(*) filter (where state = 'completed') as completed,
           count(*) filter (where state = 'stopped' and stop_reason in (${sql.join([...ERROR_STOP_REASONS])})) as errors,
           percentile_cont(0.95) within group (order by extract(epoch from updated_at - created_at))
             filter (where state in (${sql.join([...TERMINAL_STATES])})) as p95,
           avg(spend_micro_usd)::float8 as cost,
           (select count(*) from actions a where a.workflow_id in (select id from w) and a.decision = 'DENY')
             + (select count(*) from proposals p where p.workflow_id in (select id from w) and p.status = 'invalid') as unsafe,
           (select count(*) from operations o where o.workflow_id in (select id from w) and o.status = 'failed_unknown') as unknown
      from w`.execute(db);
  const r = row.rows[0]!;
  const runs = Number(r.runs);
  const terminal = Number(r.terminal);
  return {
    release,
    runs,
    terminal,
    taskSuccess: rate(Number(r.completed), terminal),
    unsafePerRun: rate(Number(r.unsafe), runs),
    errorRate: rate(Number(r.errors), terminal),
    failedUnknownPerRun: rate(Number(r.unknown), runs),
    p95TerminalSeconds: r.p95 === null ? null : Number(r.p95),
    costPerRunMicroUsd: r.cost === null ? null : Number(r.cost),
  };
}

/** The table's rows: each measure against its threshold (a null side fails closed). */
function compare(b: ReleaseMeasures, c: ReleaseMeasures, t: CanaryThresholds): CanaryRow[] {
  const row = (
    measure: CanaryRow['measure'],
    baseline: number | null,
    candidate: number | null,
    limit: string,
    safety: boolean,
    ok: (b: number, c: number) => boolean,
  ): CanaryRow => ({ measure, baseline, candidate, limit, safety, ok: baseline !== null && candidate !== null && ok(baseline, candidate) });
  return [
    row(
      'task_success',
      b.taskSuccess,
      c.taskSuccess,
      `≥ baseline − ${t.maxTaskSuccessDrop}`,
      false,
      (x, y) => y >= x - t.maxTaskSuccessDrop,
    ),
    row('unsafe_per_run', b.unsafePerRun, c.unsafePerRun, '≤ baseline (no tolerance)', true, (x, y) => y <= x),
    row(
      'p95_terminal_s',
      b.p95TerminalSeconds,
      c.p95TerminalSeconds,
      `≤ baseline × ${t.maxP95TerminalRatio}`,
      false,
      (x, y) => y <= x * t.maxP95TerminalRatio,
    ),
    row('error_rate', b.errorRate, c.errorRate, `≤ baseline + ${t.maxErrorRateIncrease}`, false, (x, y) => y <= x + t.maxErrorRateIncrease),
    row('failed_unknown_per_run', b.failedUnknownPerRun, c.failedUnknownPerRun, '≤ baseline (no tolerance)', true, (x, y) => y <= x),
    row(
      'cost_per_run_musd',
      b.costPerRunMicroUsd,
      c.costPerRunMicroUsd,
      `≤ baseline × ${t.maxCostPerRunRatio}`,
      false,
      (x, y) => y <= x * t.maxCostPerRunRatio,
    ),
  ];
}

const failing = (a: Pick<CanaryAnalysis, 'rows'>): string[] => a.rows.filter((r) => !r.ok).map((r) => r.measure);

/**
 * `gatehouse release analyze <candidate>` (docs/decisions/0210-canary-analysis.md): compares
 * the candidate's cohort with the baseline release (default: the active one) over the same
 * window — from the candidate's activation (or `sinceMs`) to now — on task success, unsafe
 * proposals, p95 time to a terminal state, errors, failed_unknown and model cost per run, with
 * the thresholds of the candidate's manifest. Fewer than `minRuns` terminal runs on either side
 * is `insufficient`.
 * @throws Error when the candidate is not registered, or there is no baseline.
 */
export async function analyzeCanary(
  db: Db | Trx,
  candidate: string,
  opts: { baseline?: string; sinceMs?: number; nowMs?: number } = {},
): Promise<CanaryAnalysis> {
  const rel = await db.selectFrom('releases').select(['status', 'activated_at']).where('id', '=', candidate).executeTakeFirst();
  if (!rel) throw new Error(`release ${candidate} is not registered`);
  const baseline =
    opts.baseline ??
    (await db.selectFrom('releases').select('id').where('status', '=', 'active').where('id', '!=', candidate).executeTakeFirst())?.id;
  if (!baseline) throw new Error(`release analyze ${candidate}: no baseline (no other active release; name one with --baseline)`);
  const manifest = loadReleaseManifest(candidate);
  const thresholds = manifest.canary ?? DEFAULT_CANARY_THRESHOLDS;
  const untilMs = opts.nowMs ?? Date.now();
  const sinceMs = opts.sinceMs ?? (rel.activated_at ? new Date(rel.activated_at).getTime() : 0);
  const measures = {
    baseline: await measureRelease(db, baseline, sinceMs, untilMs),
    candidate: await measureRelease(db, candidate, sinceMs, untilMs),
  };
  const rows = compare(measures.baseline, measures.candidate, thresholds);
  const enough = Math.min(measures.baseline.terminal, measures.candidate.terminal) >= thresholds.minRuns;
  const verdict = !enough ? 'insufficient' : rows.every((r) => r.ok) ? 'pass' : 'fail';
  const failed = verdict === 'insufficient' ? ['insufficient'] : failing({ rows });
  const failureItems = [`baseline:${baseline}`, ...failed];
  const failureDigest = overrideDigest('canary', candidate, failureItems, manifest);
  return { candidate, baseline, sinceMs, untilMs, thresholds, measures, rows, verdict, failureItems, failureDigest };
}

/** The analysis as the lines `release analyze` prints: a table, then the verdict. */
export function formatAnalysis(a: CanaryAnalysis): string[] {
  const fmt = (v: number | null): string => (v === null ? '—' : Number.isInteger(v) ? String(v) : v.toFixed(3));
  const lines = [
    `canary ${a.candidate} vs ${a.baseline}, ${new Date(a.sinceMs).toISOString()} → ${new Date(a.untilMs).toISOString()}`,
    `runs (terminal): baseline ${a.measures.baseline.runs} (${a.measures.baseline.terminal}), candidate ${a.measures.candidate.runs} (${a.measures.candidate.terminal}); needs ${a.thresholds.minRuns}`,
    `${'measure'.padEnd(24)}${'baseline'.padStart(10)}${'candidate'.padStart(11)}  ${'limit'.padEnd(28)}result`,
  ];
  for (const r of a.rows)
    lines.push(
      `${r.measure.padEnd(24)}${fmt(r.baseline).padStart(10)}${fmt(r.candidate).padStart(11)}  ${r.limit.padEnd(28)}${r.ok ? 'ok' : r.safety ? 'FAIL (safety)' : 'FAIL'}`,
    );
  lines.push(`verdict: ${a.verdict.toUpperCase()}`);
  return lines;
}

/**
 * Records the analysis in the audit chain (`release.analyzed`, outcome `<verdict>:<failing>`).
 */
export async function auditAnalysis(db: Db, a: CanaryAnalysis, operator: string, hmacKey: string): Promise<void> {
  await inTransaction(db, (trx) =>
    recordAudit(trx, {
      type: 'release.analyzed',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      outcome: `${a.verdict}:${failing(a).join(',') || 'none'};baseline:${a.baseline}`,
      revisions: { release: a.candidate },
    }),
  );
}

/**
 * `gatehouse release override <id> --reason <why>` (for a canary): asks to go past the release's
 * failing canary analysis — an approval of the approval service bound to the failing measures
 * ({@link CanaryAnalysis.failureDigest}) that a policy owner or another operator decides
 * (see `requestOverride`). Audited.
 * @returns the approval to decide.
 * @throws Error when the analysis passes (nothing to override) or the reason is malformed.
 */
export async function requestCanaryOverride(
  db: Db,
  release: string,
  opts: { operator: string; hmacKey: string; reason: string },
): Promise<OverrideTicket> {
  const a = await analyzeCanary(db, release);
  if (a.verdict === 'pass') throw new Error(`release ${release}: the canary analysis passes; there is nothing to override`);
  return requestOverride(db, {
    release,
    kind: 'canary',
    items: a.failureItems,
    manifest: loadReleaseManifest(release),
    digest: a.failureDigest,
    summary: `canary:${a.verdict}:${failing(a).join(',') || 'insufficient'}`,
    ...opts,
  });
}

/**
 * The canary check of `enable-writes` and of promoting a candidate: passes when the release is
 * not a candidate, when its analysis passes, or by consuming (once, in `trx`) an approved,
 * unexpired override bound to the same failing measures.
 * @returns how it passed.
 * @throws CanaryRefused with the analysis otherwise.
 */
export async function requireCanary(
  trx: Trx,
  release: string,
  operator: string,
  hmacKey: string,
): Promise<'not_a_candidate' | 'pass' | 'override'> {
  const r = await trx.selectFrom('releases').select('status').where('id', '=', release).executeTakeFirst();
  if (r?.status !== 'candidate') return 'not_a_candidate';
  const a = await analyzeCanary(trx, release);
  if (a.verdict === 'pass') return 'pass';
  const used = await consumeOverride(trx, {
    release,
    kind: 'canary',
    digest: a.failureDigest,
    summary: `canary:${a.verdict}:${failing(a).join(',') || 'insufficient'}`,
    operator,
    hmacKey,
  });
  if (!used) throw new CanaryRefused(a);
  return 'override';
}
