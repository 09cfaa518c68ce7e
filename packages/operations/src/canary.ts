import { sql } from 'kysely';
import { DEFAULT_CANARY_THRESHOLDS, loadReleaseManifest, PolicyDenied, STOP_REASONS, type CanaryThresholds } from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, TERMINAL_STATES, type Db, type Trx } from '@gatehouse/ledger';
import { consumeOverride, overrideDigest, requestOverride, type OverrideTicket } from './overrides.ts';
import { OpsUsageError } from './ops.ts';

/** Stop reasons that count as errors of the runtime, not outcomes of policy (docs/product/states.md#stop-reasons). */
export const ERROR_STOP_REASONS: readonly (typeof STOP_REASONS)[number][] = [
  'step_failed',
  'dependency_unavailable',
  'audit_unavailable',
  'model_error',
];

/**
 * What one release's runs did in a window (workflows created in it). Rates are per run. Runs that
 * completed with their writes withheld (`writes_withheld`: act mode while the release's
 * consequential writes were off, so only read tools were offered) are counted in `runs` and the
 * safety measures (every proposal they made is evidence) but left out of the quality measures —
 * `terminal`, task success, errors, p95 and cost — whose runs could not do what the release does
 * with writes on (docs/decisions/0724-canary-analysis-leaves-out-runs-whose-writes-were-withheld.md).
 */
export interface ReleaseMeasures {
  release: string;
  /** Every run created in the window, withheld ones included. */
  runs: number;
  /** Runs that completed with their writes withheld (left out of the quality measures). */
  writesWithheld: number;
  /** Runs in a terminal state (completed, stopped, needs_reconciliation), withheld ones left out. */
  terminal: number;
  /** Share of the terminal runs that completed (0–1; null without terminal runs). */
  taskSuccess: number | null;
  /** Denied actions plus invalid proposals, per run (every run). */
  unsafePerRun: number | null;
  /** Share of the terminal runs stopped by an error ({@link ERROR_STOP_REASONS}). */
  errorRate: number | null;
  /** Operations ending failed_unknown, per run (every run). */
  failedUnknownPerRun: number | null;
  /** 95th percentile of the time from intake to a terminal state of the terminal runs, seconds. */
  p95TerminalSeconds: number | null;
  /** Mean model spend per run, withheld runs left out, micro-USD. */
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
      `release ${analysis.candidate}: canary analysis ${analysis.verdict} against ${analysis.baseline} — ${refusalWhy(analysis)}; ` +
        `a policy owner or another operator may approve an override: gatehouse release override ${analysis.candidate} --reason "<why>"`,
    );
    this.analysis = analysis;
  }
}

const rate = (n: number, d: number): number | null => (d > 0 ? n / d : null);

/**
 * Why an analysis refuses: too few terminal runs (and how many of the candidate's were left out
 * for their withheld writes, ADR 0724) when `insufficient`, else the failing measures.
 */
function refusalWhy(a: CanaryAnalysis): string {
  if (a.verdict !== 'insufficient') return `failing: ${failing(a).join(', ')}`;
  const left = a.measures.candidate.writesWithheld;
  return `fewer than ${a.thresholds.minRuns} terminal runs on a side${left ? ` (${left} of the candidate's completed with writes withheld, not counted)` : ''}`;
}

/**
 * Measures the workflows of `release` created in [sinceMs, untilMs) from the ledger (one
 * statement; withheld runs as {@link ReleaseMeasures} says).
 * @returns counts and rates as {@link ReleaseMeasures}.
 */
export async function measureRelease(db: Db | Trx, release: string, sinceMs: number, untilMs: number): Promise<ReleaseMeasures> {
  const since = new Date(sinceMs);
  const until = new Date(untilMs);
  const terminal = sql.join([...TERMINAL_STATES]);
  const row = await sql<{
    runs: string;
    withheld: string;
    terminal: string;
    completed: string;
    errors: string;
    p95: number | null;
    cost: number | null;
    unsafe: string;
    unknown: string;
  }>`
    with w as (
      select w.id, w.state, w.stop_reason, w.created_at, w.updated_at, w.writes_withheld, b.spend_micro_usd
        from workflows w left join budgets b on b.workflow_id = w.id
       where w.release_id = ${release} and w.created_at >= ${since} and w.created_at < ${until})
    select count(*) as runs,
           count(*) filter (where writes_withheld) as withheld,
           count(*) filter (where not writes_withheld and state in (${terminal})) as terminal,
           count(*) filter (where not writes_withheld and state = 'completed') as completed,
           count(*) filter (where not writes_withheld and state = 'stopped' and stop_reason in (${sql.join([...ERROR_STOP_REASONS])})) as errors,
           percentile_cont(0.95) within group (order by extract(epoch from updated_at - created_at))
             filter (where not writes_withheld and state in (${terminal})) as p95,
           (avg(spend_micro_usd) filter (where not writes_withheld))::float8 as cost,
           (select count(*) from actions a where a.workflow_id in (select id from w) and a.decision = 'DENY')
             + (select count(*) from proposals p where p.workflow_id in (select id from w) and p.status = 'invalid') as unsafe,
           (select count(*) from operations o where o.workflow_id in (select id from w) and o.status = 'failed_unknown') as unknown
      from w`.execute(db);
  const r = row.rows[0]!;
  const runs = Number(r.runs);
  const judged = Number(r.terminal);
  return {
    release,
    runs,
    writesWithheld: Number(r.withheld),
    terminal: judged,
    taskSuccess: rate(Number(r.completed), judged),
    unsafePerRun: rate(Number(r.unsafe), runs),
    errorRate: rate(Number(r.errors), judged),
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

/** The release a candidate is compared with by default: the active one other than itself, if any. */
async function defaultBaseline(db: Db | Trx, candidate: string): Promise<string | undefined> {
  return (await db.selectFrom('releases').select('id').where('status', '=', 'active').where('id', '!=', candidate).executeTakeFirst())?.id;
}

/**
 * Checks a baseline the operator named: another release than the candidate — compared with
 * itself every measure ties and a canary with enough runs "passes" — and a registered one, whose
 * runs the ledger has (an unknown id measured no runs and read as a failing canary).
 * @throws OpsUsageError (`same_release`) when `baseline` is the candidate; Error when it is not registered.
 */
async function checkNamedBaseline(db: Db | Trx, candidate: string, baseline: string): Promise<void> {
  if (baseline === candidate)
    throw new OpsUsageError('same_release', `release analyze ${candidate} --baseline ${baseline}: the baseline must be another release`);
  const known = await db.selectFrom('releases').select('id').where('id', '=', baseline).executeTakeFirst();
  if (!known) throw new Error(`release ${baseline} is not registered (the --baseline of release analyze ${candidate})`);
}

/**
 * `gatehouse release analyze <candidate>` (docs/decisions/0210-canary-analysis.md): compares
 * the candidate's cohort with the baseline release (default: the active one) over the same
 * window — from the candidate's activation (or `sinceMs`) to now — on task success, unsafe
 * proposals, p95 time to a terminal state, errors, failed_unknown and model cost per run, with
 * the thresholds of the candidate's manifest. Fewer than `minRuns` terminal runs on either side
 * is `insufficient`.
 * @throws Error when the candidate or a named baseline is not registered, or there is no baseline;
 *   OpsUsageError (`same_release`) when the named baseline is the candidate.
 */
export async function analyzeCanary(
  db: Db | Trx,
  candidate: string,
  opts: { baseline?: string; sinceMs?: number; nowMs?: number } = {},
): Promise<CanaryAnalysis> {
  const rel = await db.selectFrom('releases').select(['status', 'activated_at']).where('id', '=', candidate).executeTakeFirst();
  if (!rel) throw new Error(`release ${candidate} is not registered`);
  const baseline = opts.baseline ?? (await defaultBaseline(db, candidate));
  if (!baseline) throw new Error(`release analyze ${candidate}: no baseline (no other active release; name one with --baseline)`);
  if (opts.baseline !== undefined) await checkNamedBaseline(db, candidate, opts.baseline);
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
    ...withheldLines(a),
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
 * The line saying how many runs of each side completed with their writes withheld and were left
 * out of the quality measures (none when no run was): an act-mode canary before `enable-writes`
 * is judged on what its runs could do, so such traffic alone is `insufficient` (ADR 0724).
 */
function withheldLines(a: CanaryAnalysis): string[] {
  const { baseline: b, candidate: c } = a.measures;
  if (!b.writesWithheld && !c.writesWithheld) return [];
  return [
    `left out (completed with writes off, only read tools offered): baseline ${b.writesWithheld}, candidate ${c.writesWithheld}; ` +
      `they are no evidence of ${a.candidate} with writes on`,
  ];
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
