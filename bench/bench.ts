import { cpus, loadavg } from 'node:os';
import { sql } from 'kysely';
import { FULL, SMOKE, type BenchSizes } from './config.ts';
import { ageRefunds, createOrders, orderIds, seedPriorRefunds } from './lib/seed.ts';
import { BenchWorld } from './lib/world.ts';
import { round } from './lib/stats.ts';
import { runFloor, type FloorReport } from './sections/floor.ts';
import { runGoverned, type GovernedReport } from './sections/governed.ts';
import { runScaling, type ScalingPoint } from './sections/scaling.ts';
import { runIsolation, type IsolationReport } from './sections/isolation.ts';
import { runReplay, type ReplayReport } from './sections/replay.ts';
import { runE2E, type E2EReport } from './sections/e2e.ts';
import { runPolicy, type PolicyReport } from './sections/policy.ts';
import { runTelemetry, type TelemetryReport } from './sections/telemetry.ts';
import { evaluateTargets, type TargetResult } from './targets.ts';

/** Everything one `./run bench` run measured (written to `bench/results/latest.json`). */
export interface BenchReport {
  meta: {
    mode: 'full' | 'smoke';
    startedAt: string;
    durationS: number;
    machine: { cpus: number; cpuModel: string; node: string; postgres: string; redis: string };
    sizes: BenchSizes;
    /** 1-minute load average at start and end: how busy the shared machine was. */
    loadAverage: { start: number; end: number };
    /**
     * Runs the executor's watchdog re-drove during the benchmark (`run.redriven` audit events):
     * 0 in a sound run; more means the figures paid for recovery work (a run the benchmark left open).
     */
    redrives: number;
    /** Runs still live at the end, once the stand-in agent loop has stopped: 0 when the benchmark ended every run it seeded. */
    liveRuns: number;
  };
  floor: FloorReport;
  /** Sections are null when they failed (their error is in {@link BenchReport.errors}). */
  governed: Record<'read' | 'refund' | 'approved', GovernedReport | null>;
  scaling: ScalingPoint[] | null;
  /** A quiet tenant's reads alone and behind another tenant's backlog (section `isolation`). */
  isolation: IsolationReport | null;
  replay: ReplayReport | null;
  e2e: E2EReport | null;
  /** Telemetry on vs off on one governed call (section `telemetry`). */
  telemetry: TelemetryReport | null;
  /** Peak RSS per service (max over its processes) and of the benchmark process, MB. */
  memory: Record<string, number>;
  policy: PolicyReport | null;
  targets: TargetResult[];
  /** Section → error message, for every section that failed. */
  errors: Record<string, string>;
}

/** Options of {@link runBench}. */
export interface BenchOptions {
  smoke?: boolean;
  /**
   * Sections to run besides the floor probes: any of `governed`, `telemetry`, `scaling`, `isolation`, `replay`, `e2e`,
   * `policy` (default all; `BENCH_SECTIONS=replay,policy` on the command line). Others are null.
   */
  sections?: string[];
  /** Overrides of the sizes (e.g. `BENCH_SIZES='{"replayActions":200}'` on the command line). */
  sizes?: Partial<BenchSizes>;
  /** Progress lines (default: stderr). */
  log?: (line: string) => void;
  /** On SIGINT/SIGTERM stop every process, drop the database and prefix, then exit 130 (the CLI). */
  handleSignals?: boolean;
}

/**
 * Runs every benchmark and the policy benchmark (docs/decisions/0030-benchmark-method.md) in one world of its own
 * (database `gh_bench_*`, Redis prefix `ghbench-*`, service processes), floors first so every
 * ratio compares figures of the same run, and tears the world down whatever happens. A section
 * that fails is reported in `errors` (the world's logs are then kept and named) and the others
 * still run.
 * @throws when the world cannot start or the floor probes fail (nothing to compare against).
 */
export async function runBench(opts: BenchOptions = {}): Promise<BenchReport> {
  const sizes = { ...(opts.smoke ? SMOKE : FULL), ...opts.sizes };
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const started = Date.now();
  const loadStart = round(loadavg()[0] ?? 0);
  const w = new BenchWorld();
  const errors: Record<string, string> = {};
  const onSignal = (sig: NodeJS.Signals): void => {
    log(`[bench] ${sig}: stopping services, dropping the database and the Redis prefix`);
    void w.close().finally(() => process.exit(130));
  };
  if (opts.handleSignals) for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, onSignal);
  const step = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const t0 = Date.now();
    log(`[bench] ${name} …`);
    const out = await fn();
    log(`[bench] ${name} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return out;
  };
  const wanted = (key: string): boolean => !opts.sections || opts.sections.includes(key);
  const section = async <T>(key: string, name: string, fn: () => Promise<T>): Promise<T | null> => {
    if (!wanted(key)) return null;
    try {
      return await step(name, fn);
    } catch (err) {
      errors[name] = (err as Error).message;
      log(`[bench] ${name} FAILED: ${(err as Error).stack ?? String(err)}`);
      return null;
    }
  };
  try {
    // The agent loop starts only for the ticket run: until then the benchmark consumes `results`.
    await step('starting staging, model-stub, audit, policy-gateway, approval, executor', () =>
      w.start(['staging', 'model-stub', 'audit', 'policy-gateway', 'approval', 'executor']),
    );
    // Orders: B for reads and allowed refunds, C for approved refunds, D for the replay (C and D
    // carry an executed refund at the auto limit, so new refunds there need approval), O for tickets.
    const plain = orderIds('B', 0, 300);
    const approvedOrders = orderIds('C', 0, 100);
    const replayOrders = orderIds('D', 0, 200);
    const ticketOrders = orderIds('O', 2000, sizes.tickets);
    await createOrders(w.db, [...plain, ...approvedOrders, ...replayOrders, ...ticketOrders]);
    // The scaling load: one rep per tenant, each on 40 orders of their own tenant (letters S, T, …).
    const tenantLoad = w.actors.map((a, i) => ({
      ...a,
      orders: orderIds(String.fromCharCode(83 + Math.floor(i / 2)), (i % 2) * 5000, 40),
    }));
    for (const t of tenantLoad) await createOrders(w.db, t.orders, 50_000, t.tenant);
    await seedPriorRefunds(w.db, [...approvedOrders, ...replayOrders]);
    w.startResultsConsumer();

    const floor = await step('floor probes', () => runFloor(w, sizes, plain[0]!));
    const governed = {
      read: await section('governed', 'governed read', () => runGoverned(w, sizes, 'read', floor, plain)),
      refund: await section('governed', 'governed refund (ALLOW)', () => runGoverned(w, sizes, 'refund', floor, plain)),
      approved: await section('governed', 'governed refund (approved)', () => runGoverned(w, sizes, 'approved', floor, approvedOrders)),
    };
    await ageRefunds(w.db);
    const telemetry = await section('telemetry', 'telemetry on vs off', () => runTelemetry(w, sizes, plain));
    const scaling = await section('scaling', 'scaling', () => runScaling(w, sizes, tenantLoad));
    await w.setExecutors(1);
    const isolation = await section('isolation', 'tenant isolation', () => runIsolation(w, sizes, tenantLoad[0]!, tenantLoad[1]!));
    await ageRefunds(w.db);
    // The replay takes what the budget leaves after the ticket run, the policy runs and shutdown.
    const reserveMs = sizes.loadMaxMs + 45_000 + sizes.policyLedger.length * (2 * sizes.policyTimeMs + 15_000);
    const replayBudget = Math.max(30_000, started + sizes.budgetMs - reserveMs - Date.now());
    const replay = await section('replay', 'duplicate-delivery replay', () => runReplay(w, sizes, replayOrders, replayBudget));
    await w.setExecutors(1);
    await ageRefunds(w.db);
    const e2e = await section('e2e', 'end-to-end tickets', () => runE2E(w, sizes, ticketOrders));
    w.notePeakRss();
    const memory = { ...w.peakRss };
    const machine = await machineInfo(w);
    const redrives = await w.redrives();
    await w.stopResultsConsumer();
    const liveRuns = await w.liveRuns();
    await step('stopping services', () => w.close({ keepLogs: Object.keys(errors).length > 0 }));
    const policy = await section('policy', 'policy decisions', () => runPolicy(sizes));
    const report: Omit<BenchReport, 'targets'> = {
      meta: {
        mode: opts.smoke ? 'smoke' : 'full',
        startedAt: new Date(started).toISOString(),
        durationS: 0,
        machine,
        sizes,
        loadAverage: { start: loadStart, end: round(loadavg()[0] ?? 0) },
        redrives,
        liveRuns,
      },
      floor,
      governed,
      scaling,
      isolation,
      replay,
      e2e,
      telemetry,
      memory,
      policy,
      errors,
    };
    report.meta.durationS = round((Date.now() - started) / 1000);
    return { ...report, targets: evaluateTargets(report) };
  } catch (err) {
    errors.world = (err as Error).message;
    throw err;
  } finally {
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.off(sig, onSignal);
    const failed = Object.keys(errors).length > 0;
    await w.close({ keepLogs: failed });
    if (failed) log(`[bench] service logs kept in ${w.dir}`);
  }
}

async function machineInfo(w: BenchWorld): Promise<BenchReport['meta']['machine']> {
  const pgv = await sql<{ v: string }>`SELECT current_setting('server_version') AS v`.execute(w.db);
  const info = await w.redis.info('server');
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    postgres: pgv.rows[0]?.v ?? 'unknown',
    redis: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown',
  };
}
