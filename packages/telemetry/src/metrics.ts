import { diag, metrics, type Attributes, type Counter, type Histogram, type Meter, type MeterProvider } from '@opentelemetry/api';
import { STOP_REASONS } from '@gatehouse/contracts';

/**
 * The metrics of Gatehouse (docs/product/design.md#observability). Labels are low-cardinality
 * only — tool, outcome, rule, decision, reason, release, policy revision, service, queue — never
 * ids of runs, actors, approvals, operations or calls (those go to traces and audit).
 * Durations are milliseconds. `kind` is the instrument each is recorded with (an observable
 * gauge for `gauge`); the deploy checks derive the Prometheus names from it.
 */
export const METRICS = {
  proposals: { kind: 'counter', name: 'gatehouse.proposals', description: 'Tool calls proposed by the model (one per call), by tool' },
  decisions: {
    kind: 'counter',
    name: 'gatehouse.policy.decisions',
    description: 'Policy outcomes for proposals (ALLOW, DENY, REQUIRE_APPROVAL, SUPPRESSED, INVALID), by tool, rule and stage',
  },
  denials: { kind: 'counter', name: 'gatehouse.policy.denials', description: 'Proposals denied by policy, by tool and rule' },
  approvals: {
    kind: 'counter',
    name: 'gatehouse.approvals',
    description: 'Approval lifecycle: requested, granted, denied, expired, consumed, voided; by tool and rule',
  },
  attempts: {
    kind: 'counter',
    name: 'gatehouse.executions.attempts',
    description: 'Claims of an operation for execution (each try of an effect), by tool',
  },
  outcomes: {
    kind: 'counter',
    name: 'gatehouse.executions.outcomes',
    description: 'Execution results: succeeded, failed, unknown, replayed, reconciled; by tool',
  },
  executionDuration: {
    kind: 'histogram',
    name: 'gatehouse.executions.duration',
    description: 'Adapter time of one execution, by tool and outcome',
    unit: 'ms',
  },
  failedUnknown: {
    kind: 'counter',
    name: 'gatehouse.executions.failed_unknown',
    description: 'Executions whose outcome is unknown (may have happened), by tool',
  },
  idempotencyConflicts: {
    kind: 'counter',
    name: 'gatehouse.idempotency.conflicts',
    description: 'Operation keys seen again with other parameters (refused), by tool',
  },
  redrives: {
    kind: 'counter',
    name: 'gatehouse.watchdog.redrives',
    description: 'Jobs the watchdog re-enqueued for a live run (lost with Redis, failed, stale), by queue and reason',
  },
  runs: { kind: 'counter', name: 'gatehouse.runs', description: 'Workflow runs started, completed and stopped' },
  stops: { kind: 'counter', name: 'gatehouse.runs.stops', description: 'Workflow stops by reason (docs/product/states.md#stop-reasons)' },
  budgetStops: {
    kind: 'counter',
    name: 'gatehouse.budget.stops',
    description: 'Workflow stops because a budget (rounds, calls, time, spend) ran out',
  },
  auditLag: {
    kind: 'histogram',
    name: 'gatehouse.audit.lag',
    description: 'Time from an audit event entering the outbox to its place in the chain',
    unit: 'ms',
  },
  auditBacklog: {
    kind: 'gauge',
    name: 'gatehouse.audit.backlog',
    description: 'Audit events waiting in the outbox to be chained',
    unit: '{event}',
  },
  auditBacklogAge: {
    kind: 'gauge',
    name: 'gatehouse.audit.backlog_age',
    description: 'Age of the oldest unchained audit event (0 when none)',
    unit: 'ms',
  },
  alerts: { kind: 'counter', name: 'gatehouse.monitor.alerts', description: 'Invariant monitor alerts raised, by monitor' },
  jobDuration: {
    kind: 'histogram',
    name: 'gatehouse.jobs.duration',
    description: 'Processing time of one queue job, by queue and outcome',
    unit: 'ms',
  },
  queueDepth: { kind: 'gauge', name: 'gatehouse.queue.depth', description: 'Jobs in a consumed queue, by queue and state', unit: '{job}' },
  modelDuration: {
    kind: 'histogram',
    name: 'gatehouse.model.duration',
    description: 'Time of one model request (the Responses API, the client retries included), by model, release and outcome',
    unit: 'ms',
  },
  modelInputTokens: {
    kind: 'counter',
    name: 'gatehouse.model.tokens.input',
    description: 'Input tokens the model reported (usage.input_tokens), by model and release',
    unit: '{token}',
  },
  modelOutputTokens: {
    kind: 'counter',
    name: 'gatehouse.model.tokens.output',
    description: 'Output tokens the model reported (usage.output_tokens), by model and release',
    unit: '{token}',
  },
  modelSpend: {
    kind: 'counter',
    name: 'gatehouse.model.spend_micro_usd',
    description: "Model spend in micro-USD, priced by the release's model entry as the spend budgets are (ADR 0183), by model and release",
    unit: '{micro_usd}',
  },
  stuckRuns: {
    kind: 'gauge',
    name: 'gatehouse.runs.stuck',
    description: 'Live runs past their no-progress bound that wait on no person (as `gatehouse reconcile` lists them), by state',
    unit: '{run}',
  },
  limitRechecks: {
    kind: 'counter',
    name: 'gatehouse.limits.rechecks',
    description:
      'Refund decisions and claims rolled back and made again under the limit locks because the limits changed while they were made (ADR 0430, 0450), by stage and tool',
  },
  dependencyErrors: {
    kind: 'counter',
    name: 'gatehouse.dependency.errors',
    description: 'Failed requests to a dependency (model, payments, orders, mail, changes, postgres, redis), by dependency and kind',
  },
} as const;

/** Latency buckets, ms: from a fast database step to the adapter deadline and beyond. */
const MS_BUCKETS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000];

/** Most distinct values one label key may take before further values read `other`. */
const MAX_VALUES_PER_LABEL = 64;
const LABEL_SHAPE = /^[A-Za-z0-9_.:-]{1,64}$/;
const seenValues = new Map<string, Set<string>>();

/**
 * A label value that keeps the series bounded: known shapes only (letters, digits, `_.:-`, at
 * most 64 characters) and at most {@link MAX_VALUES_PER_LABEL} values per key; anything else is
 * `other`. Labels come from closed sets (catalog tools, rule ids, enums) — this is the backstop.
 */
function bounded(key: string, value: unknown): string {
  if (typeof value !== 'string' || !LABEL_SHAPE.test(value)) return 'other';
  let seen = seenValues.get(key);
  if (!seen) seenValues.set(key, (seen = new Set()));
  if (seen.has(value)) return value;
  if (seen.size >= MAX_VALUES_PER_LABEL) return 'other';
  seen.add(value);
  return value;
}

function labels(raw: Record<string, unknown>): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(raw)) if (v !== null && v !== undefined) out[k] = bounded(k, v);
  return out;
}

interface Instruments {
  provider: MeterProvider;
  meter: Meter;
  counters: Map<string, Counter>;
  histograms: Map<string, Histogram>;
}
let current: Instruments | undefined;

/** Instruments of the current global meter provider (rebuilt when a provider is registered). */
function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider !== provider) {
    current = { provider, meter: provider.getMeter('gatehouse'), counters: new Map(), histograms: new Map() };
  }
  return current;
}

type Def = { kind?: string; name: string; description: string; unit?: string };

function add(def: Def, attrs: Record<string, unknown>, value = 1): void {
  const i = instruments();
  let c = i.counters.get(def.name);
  if (!c) i.counters.set(def.name, (c = i.meter.createCounter(def.name, { description: def.description, unit: def.unit ?? '1' })));
  c.add(value, labels(attrs));
}

function observe(def: Def, attrs: Record<string, unknown>, value: number): void {
  const i = instruments();
  let h = i.histograms.get(def.name);
  if (!h)
    i.histograms.set(
      def.name,
      (h = i.meter.createHistogram(def.name, {
        description: def.description,
        unit: def.unit,
        advice: { explicitBucketBoundaries: MS_BUCKETS },
      })),
    );
  h.record(Math.max(0, value), labels(attrs));
}

/** Telemetry never fails work: a recording error is reported to the OTel diag log and dropped. */
function safely(what: string, fn: () => void): void {
  try {
    fn();
  } catch (err) {
    diag.warn(`gatehouse metrics: ${what} failed: ${(err as Error).message}`);
  }
}

let processRelease: string | undefined;

/** Sets the release label of this process's own metrics (jobs, queue depth). */
export function setMetricsRelease(release: string): void {
  processRelease = release;
}

/** The fields of an audit event the metrics read (a subset of `AuditEvent` in contracts). */
export interface AuditMetricEvent {
  type: string;
  service?: string | null;
  tool?: string | null;
  ruleId?: string | null;
  decision?: string | null;
  outcome?: string | null;
  latencyMs?: number | null;
  revisions?: { policy?: string | null; release?: string | null } | null;
}

const STOP_REASON_SET: ReadonlySet<string> = new Set(STOP_REASONS);

/** Maps one chained audit event onto the counters it feeds. */
function countEvent(e: AuditMetricEvent): void {
  const base = { release: e.revisions?.release, service: e.service };
  const withPolicy = { ...base, policy_revision: e.revisions?.policy };
  switch (e.type) {
    case 'proposal.received':
      add(METRICS.proposals, { ...base, tool: e.tool });
      break;
    case 'proposal.invalid':
      add(METRICS.decisions, { ...withPolicy, tool: e.tool, decision: 'INVALID', rule: 'validation', stage: 'proposal' });
      break;
    case 'policy.decision': {
      const stage = e.outcome?.startsWith('reevaluated') ? 'execution' : 'proposal';
      add(METRICS.decisions, { ...withPolicy, tool: e.tool, decision: e.decision, rule: e.ruleId, stage });
      if (e.decision === 'DENY') add(METRICS.denials, { ...withPolicy, tool: e.tool, rule: e.ruleId, stage });
      break;
    }
    case 'approval.requested':
      add(METRICS.approvals, { ...withPolicy, tool: e.tool, rule: e.ruleId, outcome: 'requested' });
      break;
    case 'approval.decided': {
      const outcome =
        e.outcome === 'expired' ? 'expired' : e.decision === 'approved' ? 'granted' : e.decision === 'denied' ? 'denied' : 'other';
      add(METRICS.approvals, { ...withPolicy, tool: e.tool, outcome });
      break;
    }
    case 'approval.consumed':
      add(METRICS.approvals, { ...withPolicy, tool: e.tool, outcome: 'consumed' });
      break;
    case 'approval.voided':
      add(METRICS.approvals, { ...withPolicy, tool: e.tool, outcome: 'voided' });
      break;
    case 'operation.claimed':
      add(METRICS.attempts, { ...base, tool: e.tool });
      break;
    case 'operation.succeeded':
    case 'operation.failed':
    case 'operation.unknown': {
      const outcome = e.type.slice('operation.'.length);
      add(METRICS.outcomes, { ...base, tool: e.tool, outcome });
      if (typeof e.latencyMs === 'number') observe(METRICS.executionDuration, { ...base, tool: e.tool, outcome }, e.latencyMs);
      if (outcome === 'unknown') add(METRICS.failedUnknown, { ...base, tool: e.tool });
      if (e.outcome === 'idempotency_conflict') add(METRICS.idempotencyConflicts, { ...base, tool: e.tool });
      break;
    }
    case 'operation.replayed':
    case 'operation.reconciled':
      add(METRICS.outcomes, { ...base, tool: e.tool, outcome: e.type.slice('operation.'.length) });
      break;
    case 'run.redriven': {
      const [queue, reason] = (e.outcome ?? '').split(':');
      add(METRICS.redrives, { ...base, queue, reason });
      break;
    }
    case 'run.started':
    case 'run.completed':
      add(METRICS.runs, { ...base, outcome: e.type.slice('run.'.length) });
      break;
    case 'run.stopped': {
      const reason = e.outcome && STOP_REASON_SET.has(e.outcome) ? e.outcome : 'other';
      add(METRICS.runs, { ...base, outcome: 'stopped' });
      add(METRICS.stops, { ...base, reason });
      if (reason === 'budget_exhausted') add(METRICS.budgetStops, base);
      break;
    }
  }
}

/**
 * Counts audit events as they enter the hash chain. The audit service is the single writer of
 * the chain and calls this once per event after the chaining transaction commits, so every
 * counter counts committed facts exactly once (a rolled-back or redelivered step never counts
 * twice) and agrees with `gatehouse audit verify`. `outboxCreatedAtMs` (epoch ms of the outbox
 * row) feeds `gatehouse.audit.lag`. Never throws.
 */
export function recordChainedAuditEvents(
  events: ReadonlyArray<{ event: AuditMetricEvent; outboxCreatedAtMs?: number }>,
  chainedAtMs = Date.now(),
): void {
  safely('audit events', () => {
    for (const { event, outboxCreatedAtMs } of events) {
      countEvent(event);
      if (outboxCreatedAtMs !== undefined) observe(METRICS.auditLag, { service: event.service }, chainedAtMs - outboxCreatedAtMs);
    }
  });
}

/** Records one processed queue job: `queue` is the contract's base name (`executions`). Never throws. */
export function recordJob(queue: string, outcome: 'completed' | 'failed' | 'rejected', durationMs: number): void {
  safely('job', () => observe(METRICS.jobDuration, { queue, outcome, release: processRelease }, durationMs));
}

/**
 * Counts one decision (`stage` `decision`, the policy gateway; ADR 0450) or first claim (`claim`,
 * the executor; ADR 0430) of `tool` whose check under the limit locks found the limits changed:
 * its transaction rolled back and it is made again with the locks taken first
 * (`gatehouse.limits.rechecks`). Counted where it happens, not from the audit chain: the
 * rolled-back attempt leaves no event. A rising rate means refunds competing for one limit (one
 * order, one user's day, one tenant's hour) — each recheck is a transaction done twice. Never throws.
 */
export function recordLimitRecheck(stage: 'decision' | 'claim', tool: string): void {
  safely('limit recheck', () => add(METRICS.limitRechecks, { stage, tool, release: processRelease }));
}

/** Records `count` (default 1) alerts raised by the invariant monitor `monitor`. Never throws. */
export function recordAlert(monitor: string, count = 1): void {
  safely('alert', () => add(METRICS.alerts, { monitor }, count));
}

/** One reading of an observable gauge: which gauge, its value and labels. */
interface GaugeReading {
  gauge: Def;
  value: number;
  attributes?: Record<string, unknown>;
}

/** How long gauges may take to read their source before a collection goes on without them, ms. */
export const GAUGE_READ_TIMEOUT_MS = 2000;

/**
 * Registers observable gauges fed by one `read` per metric collection (only while a reader
 * collects: with metrics off it never runs). A read that fails or takes longer than
 * {@link GAUGE_READ_TIMEOUT_MS} reports nothing for that collection — a slow database or Redis
 * never stalls an export, and an export never stalls the source.
 */
function observeGauges(defs: Def[], read: () => Promise<GaugeReading[]>): void {
  safely(`gauges ${defs.map((d) => d.name).join(', ')}`, () => {
    const { meter } = instruments();
    const gauges = new Map(defs.map((d) => [d.name, meter.createObservableGauge(d.name, { description: d.description, unit: d.unit })]));
    meter.addBatchObservableCallback(
      async (result) => {
        let timer: NodeJS.Timeout | undefined;
        try {
          const timeout = new Promise<GaugeReading[]>((resolve) => {
            timer = setTimeout(() => resolve([]), GAUGE_READ_TIMEOUT_MS);
            timer.unref();
          });
          for (const r of await Promise.race([read(), timeout])) {
            const gauge = gauges.get(r.gauge.name);
            if (gauge) result.observe(gauge, r.value, labels(r.attributes ?? {}));
          }
        } catch (err) {
          diag.debug(`gatehouse metrics: gauge read failed: ${(err as Error).message}`);
        } finally {
          clearTimeout(timer);
        }
      },
      [...gauges.values()],
    );
  });
}

/**
 * Observes the depth of the queues this process consumes: `read` returns job counts per queue
 * (contract base name) and state (`waiting`, `active`, `delayed`, `failed`, …). Register once
 * per process, after {@link startTelemetry}.
 */
export function observeQueueDepth(read: () => Promise<Array<{ queue: string; state: string; count: number }>>): void {
  observeGauges([METRICS.queueDepth], async () =>
    (await read()).map((r) => ({
      gauge: METRICS.queueDepth,
      value: r.count,
      attributes: { queue: r.queue, state: r.state, release: processRelease },
    })),
  );
}

/**
 * Observes the audit backlog: `read` returns the number of unchained events and the age of the
 * oldest one in ms (0 when none). Registered by the audit service.
 */
export function observeAuditBacklog(read: () => Promise<{ events: number; oldestAgeMs: number }>): void {
  observeGauges([METRICS.auditBacklog, METRICS.auditBacklogAge], async () => {
    const r = await read();
    return [
      { gauge: METRICS.auditBacklog, value: r.events },
      { gauge: METRICS.auditBacklogAge, value: r.oldestAgeMs },
    ];
  });
}

/** Outcome of one model request: answered, refused by the model (a 4xx), unavailable (408/429/5xx, no answer). */
export type ModelOutcome = 'ok' | 'rejected' | 'unavailable' | 'error';

/** One model request as {@link recordModelCall} counts it. */
export interface ModelCall {
  /** The model the release names (its id, e.g. `gpt-5-mini`): a label. */
  model: string;
  outcome: ModelOutcome;
  /** Wall time of the request, ms. */
  durationMs: number;
  /** usage.input_tokens / usage.output_tokens of an answer (absent when none came). */
  inputTokens?: number;
  outputTokens?: number;
  /** Spend of the answer in micro-USD (`modelSpendMicroUsd` of contracts, ADR 0183). */
  spendMicroUsd?: number;
}

/**
 * Records one model request of the agent loop: its duration by model, release and outcome, and
 * for an answer its input and output tokens and spend (micro-USD, the unit of the spend budgets
 * and the tenant cap). Counted when the answer arrives: a round re-run later (a follow-up during
 * the call) was still paid for. Never throws.
 */
export function recordModelCall(call: ModelCall): void {
  safely('model call', () => {
    const attrs = { model: call.model, release: processRelease, outcome: call.outcome };
    observe(METRICS.modelDuration, attrs, call.durationMs);
    const counted = { model: call.model, release: processRelease };
    if (call.inputTokens) add(METRICS.modelInputTokens, counted, call.inputTokens);
    if (call.outputTokens) add(METRICS.modelOutputTokens, counted, call.outputTokens);
    if (call.spendMicroUsd) add(METRICS.modelSpend, counted, call.spendMicroUsd);
  });
}

/** Dependencies whose errors are counted (`dependency` label). */
export const DEPENDENCIES = ['model', 'payments', 'orders', 'mail', 'changes', 'postgres', 'redis'] as const;
/** One of {@link DEPENDENCIES}. */
export type DependencyName = (typeof DEPENDENCIES)[number];
/**
 * Kinds of dependency error (`kind` label): an HTTP 5xx answer, 429 (throttled), no answer in
 * time, connection refused, another connection failure, a pooled connection lost.
 */
export const DEPENDENCY_ERROR_KINDS = ['http_5xx', 'throttled', 'timeout', 'refused', 'connection', 'connection_lost'] as const;
/** One of {@link DEPENDENCY_ERROR_KINDS}. */
export type DependencyErrorKind = (typeof DEPENDENCY_ERROR_KINDS)[number];

/** Counts one failed request to `dependency` (`gatehouse.dependency.errors`). Never throws. */
export function recordDependencyError(dependency: DependencyName, kind: DependencyErrorKind): void {
  safely('dependency error', () => add(METRICS.dependencyErrors, { dependency, kind }));
}

/**
 * Observes the stuck runs: `read` returns the state of each live run past its no-progress bound
 * (`listStuckRuns` of the ledger), counted by state at each collection. Registered by the
 * executor; replicas report the same value (aggregate with max).
 */
export function observeStuckRuns(read: () => Promise<string[]>): void {
  observeGauges([METRICS.stuckRuns], async () => {
    const byState = new Map<string, number>();
    for (const state of await read()) byState.set(state, (byState.get(state) ?? 0) + 1);
    const readings = [...byState].map(([state, n]) => ({ gauge: METRICS.stuckRuns, value: n, attributes: { state } }));
    // No stuck run still reports a zero, so an alert on the series resolves.
    return readings.length ? readings : [{ gauge: METRICS.stuckRuns, value: 0, attributes: { state: 'none' } }];
  });
}
