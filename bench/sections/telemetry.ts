import { createServer, type Server } from 'node:http';
import type { BenchSizes } from '../config.ts';
import { closedLoop, type LoadResult } from '../lib/driver.ts';
import { cpuSeconds } from '../lib/proc.ts';
import { ageRefunds, endSeededRuns, seedProposals } from '../lib/seed.ts';
import { ratio, round } from '../lib/stats.ts';
import type { BenchWorld } from '../lib/world.ts';

/** One phase of the telemetry section: the same governed call, telemetry off or on. */
export interface TelemetryPhase {
  telemetry: 'off' | 'on';
  /** Restart of every service until all report ready, ms (start-up, paid once per process). */
  startMs: number;
  /** Calls of the warm-up (not timed, CPU not counted). */
  warmUpCalls: number;
  c1: LoadResult;
  c8: LoadResult;
  /** CPU the service processes used per call over the timed runs (c=1 and c=8, warm-up left out), ms. */
  cpuMsPerCall: number | null;
  /** The same by service (staging and the model-stub are the stand-in systems of record and model), ms. */
  cpuMsPerCallByService: Record<string, number>;
}

/** Telemetry's cost on one governed call (issue #14: under 10 %), docs/decisions/0260. */
export interface TelemetryReport {
  what: string;
  /** Phases in the order run: off, on, off, …, off. */
  phases: TelemetryPhase[];
  /**
   * On over off, each on phase against the mean of the two off phases around it, median over
   * the rounds: c=1 p50 (1.05 = 5 % slower), c=8 throughput (0.95 = 5 % fewer calls/s) and the
   * services' CPU per call (1.05 = 5 % more).
   */
  p50Ratio: number | null;
  throughputRatio: number | null;
  cpuRatio: number | null;
  /** `cpuRatio` by service: where the cost falls. */
  cpuRatioByService: Record<string, number | null>;
  /** On over off for the restart until ready (`startMs`), bracketed the same way: the start-up cost, apart from the cost per call. */
  startRatio: number | null;
  /** Spans and metric requests the stand-in collector received while telemetry was on. */
  exports: { traces: number; metrics: number; bytes: number };
}

/** An OTLP/HTTP receiver that reads and discards every request (the collector's cost is not ours). */
async function startSink(): Promise<{ url: string; counts: TelemetryReport['exports']; close: () => Promise<void> }> {
  const counts = { traces: 0, metrics: 0, bytes: 0 };
  const server: Server = createServer((req, res) => {
    req.on('data', (d: Buffer) => (counts.bytes += d.length));
    req.on('end', () => {
      if (req.url?.endsWith('/traces')) counts.traces++;
      if (req.url?.endsWith('/metrics')) counts.metrics++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return { url, counts, close: () => new Promise((r) => server.close(() => r())) };
}

/** Calls seeded per second of a time box: above the fastest rates seen (about 20 calls/s at c=1, 28 at c=8), so a run ends by time, not by running out. */
const SEEDED_PER_S = { c1: 25, c8: 40 };

/** CPU seconds used so far by each service process, by service name (the benchmark, Postgres and Redis left out). */
function servicesCpuS(w: BenchWorld): Map<string, number> {
  const out = new Map<string, number>();
  for (const [pid, name] of w.pids()) out.set(name, (out.get(name) ?? 0) + cpuSeconds(pid));
  return out;
}

/**
 * Governed refunds (ALLOW, 0.10) from the gateway's queue to the result, in steady state: a
 * warm-up of `telemetryWarmUpMs` at concurrency 1 (not timed, CPU not counted), then one at a
 * time for half the latency time box, then eight in flight for `telemetryLoadMs`. The warm-up is
 * long because a service started with the telemetry preload keeps resolving and loading modules
 * through the loader hook's thread after it reports ready, and its first calls run before the JIT
 * has settled: start-up work that is paid once per process, reported apart (`startMs`), not a
 * cost per call. CPU is counted over the two timed runs. Runs seeded and not fired are ended,
 * like those whose result came back.
 */
async function measure(
  w: BenchWorld,
  sizes: BenchSizes,
  orders: string[],
  telemetry: 'off' | 'on',
  startMs: number,
): Promise<TelemetryPhase> {
  const perS = (rate: number, ms: number): number => Math.max(8, Math.ceil((rate * ms) / 1000));
  const nw = perS(SEEDED_PER_S.c1, sizes.telemetryWarmUpMs);
  const n1 = sizes.refund1;
  const n8 = perS(SEEDED_PER_S.c8, sizes.telemetryLoadMs);
  const calls = await seedProposals(
    w.db,
    Array.from({ length: nw + n1 + n8 }, (_, i) => ({
      tool: 'issue_refund' as const,
      arguments: { orderId: orders[i % orders.length]!, amount: '0.10', reason: 'Customer reported: damaged item' },
      mode: 'act' as const,
    })),
  );
  const fire = async (i: number): Promise<void> => {
    await w.propose(calls[i]!, 60_000);
  };
  const warm = await closedLoop(nw, 1, (i) => fire(i), { maxMs: sizes.telemetryWarmUpMs });
  const cpuBefore = servicesCpuS(w);
  const c1 = await closedLoop(n1, 1, (i) => fire(nw + i), { maxMs: sizes.latencyMaxMs / 2 });
  const c8 = await closedLoop(n8, 8, (i) => fire(nw + n1 + i), { maxMs: sizes.telemetryLoadMs });
  const fired = c1.ops + c8.ops;
  const cpuByService: Record<string, number> = {};
  let cpuS = 0;
  for (const [name, seconds] of servicesCpuS(w)) {
    const used = seconds - (cpuBefore.get(name) ?? 0);
    cpuS += used;
    cpuByService[name] = fired ? round((used * 1000) / fired) : 0;
  }
  const unfired = [...calls.slice(warm.ops, nw), ...calls.slice(nw + c1.ops, nw + n1), ...calls.slice(nw + n1 + c8.ops)];
  await endSeededRuns(
    w.db,
    unfired.map((c) => c.workflowId),
  );
  await ageRefunds(w.db);
  return {
    telemetry,
    startMs,
    warmUpCalls: warm.ops,
    c1,
    c8,
    cpuMsPerCall: fired ? round((cpuS * 1000) / fired) : null,
    cpuMsPerCallByService: cpuByService,
  };
}

/** Median of the non-null values, or null when there is none. */
function median(xs: Array<number | null>): number | null {
  const v = xs.filter((x): x is number => x !== null).sort((a, b) => a - b);
  if (!v.length) return null;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
}

/** For each on phase, `pick(on)` over the mean of `pick` of the off phases before and after it; the median of those. */
function bracketedRatio(phases: TelemetryPhase[], pick: (p: TelemetryPhase) => number | null): number | null {
  const ratios: Array<number | null> = [];
  for (let i = 1; i + 1 < phases.length; i += 2) {
    const [before, on, after] = [pick(phases[i - 1]!), pick(phases[i]!), pick(phases[i + 1]!)];
    ratios.push(before === null || after === null ? null : ratio(on, (before + after) / 2));
  }
  const m = median(ratios);
  return m === null ? null : round(m);
}

/**
 * The same governed call with telemetry off and on in turn — off, on, off, …, off, with
 * `telemetryRounds` on phases (docs/decisions/0030: one run, one world). A shared machine's
 * speed drifts by tens of percent within minutes (other tenants of the host), so each on phase
 * is compared with the two off phases around it and the median over the rounds is reported.
 * "Off" is the default without a collector (no endpoint: the preload does nothing, no
 * providers); "on" restarts every service with `OTEL_EXPORTER_OTLP_ENDPOINT` at a stand-in
 * collector that discards what it gets, every auto-instrumentation and metrics exported every
 * 5 s, so export work falls inside the timed runs. Every phase starts from freshly started
 * services, off ones included, so both pay the same warm-up.
 */
export async function runTelemetry(w: BenchWorld, sizes: BenchSizes, orders: string[]): Promise<TelemetryReport> {
  const sink = await startSink();
  const on = { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_METRIC_EXPORT_INTERVAL: '5000' };
  const off = { OTEL_EXPORTER_OTLP_ENDPOINT: undefined, OTEL_METRIC_EXPORT_INTERVAL: undefined };
  try {
    const phases: TelemetryPhase[] = [];
    for (let i = 0; i < 2 * sizes.telemetryRounds + 1; i++) {
      const telemetry = i % 2 ? 'on' : 'off';
      const restarted = Date.now();
      await w.restartAll(telemetry === 'on' ? on : off);
      phases.push(await measure(w, sizes, orders, telemetry, Date.now() - restarted));
      // Spans leave in batches (every 5 s by default): on a short run, wait for the first batch
      // (at most 15 s) before the restart that ends this on phase; the timing above is unaffected.
      for (const until = Date.now() + 15_000; telemetry === 'on' && sink.counts.traces === 0 && Date.now() < until;)
        await new Promise((r) => setTimeout(r, 250));
    }
    return {
      what: 'issue_refund 0.10 (ALLOW): proposal enqueued → result ready; telemetry on vs off',
      phases,
      p50Ratio: bracketedRatio(phases, (p) => p.c1.latency.p50),
      throughputRatio: bracketedRatio(phases, (p) => p.c8.opsPerSec),
      cpuRatio: bracketedRatio(phases, (p) => p.cpuMsPerCall),
      startRatio: bracketedRatio(phases, (p) => p.startMs),
      cpuRatioByService: Object.fromEntries(
        Object.keys(phases[0]?.cpuMsPerCallByService ?? {}).map((name) => [
          name,
          bracketedRatio(phases, (p) => p.cpuMsPerCallByService[name] || null),
        ]),
      ),
      exports: { ...sink.counts },
    };
  } finally {
    await sink.close();
  }
}
