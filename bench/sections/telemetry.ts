import { createServer, type Server } from 'node:http';
import { jobOptionsFor, queueName } from '@gatehouse/contracts';
import type { BenchSizes } from '../config.ts';
import { closedLoop, type LoadResult } from '../lib/driver.ts';
import { ageRefunds, seedProposals } from '../lib/seed.ts';
import { ratio } from '../lib/stats.ts';
import { RELEASE, type BenchWorld } from '../lib/world.ts';

/** Telemetry's cost on one governed call (issue #14: under 10 %), docs/decisions/0260. */
export interface TelemetryReport {
  what: string;
  /** Concurrency-1 latency and concurrency-8 throughput with telemetry off, before and after the run with it on. */
  offBefore: { c1: LoadResult; c8: LoadResult };
  on: { c1: LoadResult; c8: LoadResult };
  offAfter: { c1: LoadResult; c8: LoadResult };
  /** On p50 over the mean of the two off p50s (1.05 = 5 % slower). */
  p50Ratio: number | null;
  /** On throughput over the mean of the two off throughputs (0.95 = 5 % fewer calls/s). */
  throughputRatio: number | null;
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

/** Governed refunds (ALLOW, 0.10) from the gateway's queue to the result: `n1` one at a time, `n8` eight in flight. */
async function measure(w: BenchWorld, sizes: BenchSizes, orders: string[]): Promise<{ c1: LoadResult; c8: LoadResult }> {
  const n1 = sizes.refund1;
  const n8 = Math.max(8, Math.round(sizes.refund50 / 4));
  const calls = await seedProposals(
    w.db,
    Array.from({ length: sizes.warmup + n1 + n8 }, (_, i) => ({
      tool: 'issue_refund' as const,
      arguments: { orderId: orders[i % orders.length]!, amount: '0.10', reason: 'Customer reported: damaged item' },
      mode: 'act' as const,
    })),
  );
  const proposals = w.queues.get(queueName('proposals', RELEASE));
  const fire = async (i: number): Promise<void> => {
    const c = calls[i]!;
    const done = w.results.wait(`${c.workflowId}/${c.callId}`, 60_000);
    await proposals.add(
      'proposal',
      { release: RELEASE, workflowId: c.workflowId, proposalId: c.proposalId, callId: c.callId },
      { ...jobOptionsFor(proposals.name), jobId: `proposal_${c.proposalId}` },
    );
    await done;
  };
  await closedLoop(sizes.warmup, 1, (i) => fire(i));
  const c1 = await closedLoop(n1, 1, (i) => fire(sizes.warmup + i), { maxMs: sizes.latencyMaxMs });
  const c8 = await closedLoop(n8, 8, (i) => fire(sizes.warmup + n1 + i), { maxMs: sizes.loadMaxMs });
  await ageRefunds(w.db);
  return { c1, c8 };
}

/**
 * The same governed call with telemetry off, on, and off again (docs/decisions/0030: one run,
 * one world; off–on–off brackets the drift of a shared machine). "Off" is the default without
 * a collector (no endpoint: the preload does nothing, no providers); "on" restarts every service
 * with `OTEL_EXPORTER_OTLP_ENDPOINT` at a stand-in collector that discards what it gets, every
 * auto-instrumentation (http, express, pg, ioredis, undici, runtime) and metrics exported every
 * 5 s, so export work falls inside the timed runs.
 */
export async function runTelemetry(w: BenchWorld, sizes: BenchSizes, orders: string[]): Promise<TelemetryReport> {
  const sink = await startSink();
  try {
    const offBefore = await measure(w, sizes, orders);
    await w.restartAll({ OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_METRIC_EXPORT_INTERVAL: '5000' });
    const on = await measure(w, sizes, orders);
    // Spans leave in batches (every 5 s by default): on a short run, wait for the first batch
    // (at most 15 s) before reading what the collector got; the timing above is unaffected.
    for (const until = Date.now() + 15_000; sink.counts.traces === 0 && Date.now() < until;) await new Promise((r) => setTimeout(r, 250));
    const exports = { ...sink.counts };
    await w.restartAll({ OTEL_EXPORTER_OTLP_ENDPOINT: undefined, OTEL_METRIC_EXPORT_INTERVAL: undefined });
    const offAfter = await measure(w, sizes, orders);
    const mean = (a: number, b: number): number => (a + b) / 2;
    return {
      what: 'issue_refund 0.10 (ALLOW): proposal enqueued → result ready; telemetry on vs off',
      offBefore,
      on,
      offAfter,
      p50Ratio: ratio(on.c1.latency.p50, mean(offBefore.c1.latency.p50, offAfter.c1.latency.p50)),
      throughputRatio: ratio(on.c8.opsPerSec, mean(offBefore.c8.opsPerSec, offAfter.c8.opsPerSec)),
      exports,
    };
  } finally {
    await sink.close();
  }
}
