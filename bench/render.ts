import type { BenchReport } from './bench.ts';
import type { GovernedReport } from './sections/governed.ts';
import type { StageSummary } from './lib/stages.ts';
import { markdownTable, type Cell } from './lib/table.ts';

const list = (o: Record<string, number>): string =>
  Object.entries(o)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
const pct = (x: number): string => `${Math.round(x * 100)} %`;
const stageTable = (stages: Record<string, StageSummary>): string =>
  markdownTable(
    ['stage', 'p50 ms', 'mean ms', 'share'],
    Object.entries(stages).map(([k, s]) => [k, s.p50, s.mean, pct(s.share)]),
  );

/**
 * The report as readable tables (Markdown, so the summary can go into the README as is): the
 * summary with ratios to the floor measured in the same run, then each benchmark's detail.
 */
export function renderReport(r: BenchReport): string {
  const { floor: f, replay: rp, e2e } = r;
  const governed = Object.values(r.governed).filter((x): x is GovernedReport => x !== null);
  const parts: string[] = [];
  parts.push(
    `# Gatehouse benchmarks (${r.meta.mode}, ${r.meta.startedAt}, ${r.meta.durationS} s, ${r.meta.machine.cpus} CPUs, load average ${r.meta.loadAverage.start} → ${r.meta.loadAverage.end}, watchdog re-drives ${r.meta.redrives}, runs left live ${r.meta.liveRuns})`,
  );
  parts.push('## Summary (ratio = Gatehouse / floor of the same run)');
  parts.push(summaryTable(r));

  parts.push('## Floor probes');
  parts.push(
    markdownTable(
      ['probe', 'p50 ms', 'p99 ms', 'ops/s'],
      [
        ['BullMQ hop (add → worker → completed), c=1', f.hop.p50, f.hop.p99, null],
        [`BullMQ addBulk ${f.bullmqThroughput.jobs} jobs, 1 worker c=50`, null, null, f.bullmqThroughput.opsPerSec],
        ['pg reservation txn (insert-if-absent + fenced update), 1 client', f.txn.p50, f.txn.p99, null],
        ['pg completion update, 1 client', f.completion.p50, f.completion.p99, null],
        ['pg reservation + completion, 8 clients', f.txn8.latency.p50, f.txn8.latency.p99, f.txn8.opsPerSec],
        ['3-stage pipeline (each stage one txn), c=1', f.pipeline1.latency.p50, f.pipeline1.latency.p99, f.pipeline1.opsPerSec],
        ['3-stage pipeline, c=50', f.pipeline50.latency.p50, f.pipeline50.latency.p99, f.pipeline50.opsPerSec],
        ['HTTP GET order (staging), c=1', f.http.p50, f.http.p99, null],
      ],
    ),
  );

  if (governed.length) {
    parts.push('## Governed calls');
    parts.push(
      markdownTable(
        [
          'call',
          'c=1 p50',
          'c=1 p99',
          'floor ms',
          '×floor',
          'c=50 calls/s',
          'c=50 p99',
          '×pipeline',
          'hops',
          'txns',
          'pg RT',
          'redis',
          'HTTP',
          'outcomes',
        ],
        governed.map((x) => [
          x.what,
          x.c1.latency.p50,
          x.c1.latency.p99,
          x.floorMs,
          x.ratioToFloor,
          x.c50.opsPerSec,
          x.c50.latency.p99,
          x.throughputVsPipeline,
          x.perCall.hops,
          x.perCall.transactions,
          x.perCall.pgRoundTrips,
          x.perCall.redisCommands,
          x.perCall.httpRequests,
          list(x.outcomes) + (x.c1.errors + x.c50.errors ? `; ${x.c1.errors + x.c50.errors} errors` : ''),
        ]),
      ),
    );
    const services = [...new Set(governed.flatMap((x) => Object.keys(x.perCall.byService)))];
    parts.push('Round trips per call by service (pg statements / BEGIN / redis commands / HTTP requests; audit: amortized chaining):');
    parts.push(
      markdownTable(
        ['call', ...services],
        governed.map((x) => [x.kind, ...services.map((s): Cell => fmtCounts(x.perCall.byService[s]))]),
      ),
    );
    parts.push('Postgres backends during the c=50 runs (mean busy, share of samples by wait event):');
    parts.push(
      markdownTable(
        ['call', 'busy backends', 'waits'],
        governed.map((x) => [
          x.kind,
          x.pgWaits.activeMean,
          Object.entries(x.pgWaits.waits)
            .map(([k, v]) => `${k} ${pct(v)}`)
            .join(', '),
        ]),
      ),
    );
    for (const x of governed) {
      parts.push(`Stages of one ${x.kind} call at c=1:`);
      parts.push(stageTable(x.stages));
    }
  }

  if (r.scaling) {
    parts.push('## Scaling (ALLOW refunds at concurrency 50, one rep in each of 9 tenants, each on their own orders)');
    parts.push(
      markdownTable(
        ['executors', 'calls/s', 'speedup', 'p50 ms', 'p99 ms', 'CPU s by party', 'dominant wait', 'bottleneck'],
        r.scaling.map((p) => [
          p.executors,
          p.load.opsPerSec,
          p.speedup,
          p.load.latency.p50,
          p.load.latency.p99,
          list(Object.fromEntries(Object.entries(p.cpu.seconds).sort((a, b) => b[1] - a[1]))),
          p.dominant,
          p.bottleneck,
        ]),
      ),
    );
  }

  const iso = r.isolation;
  if (iso) {
    parts.push(
      `## Tenant isolation (${iso.quietTenant}'s reads at c=1, alone and right after ${iso.busyTenant} put ${iso.backlog} reads on the same queues)`,
    );
    parts.push(
      markdownTable(
        ['run', 'calls', 'p50 ms', 'p90 ms', 'p99 ms'],
        [
          ['alone', iso.alone.ops, iso.alone.latency.p50, iso.alone.latency.p90, iso.alone.latency.p99],
          ['behind the backlog', iso.loaded.ops, iso.loaded.latency.p50, iso.loaded.latency.p90, iso.loaded.latency.p99],
        ],
      ),
    );
    parts.push(
      `Slowdown (p50 behind the backlog / alone): ${iso.slowdown ?? '–'}×. The backlog drained in ${iso.backlogDrainMs} ms; ${iso.backlogLeft} of its calls were still unanswered when the quiet run ended.`,
    );
    if (iso.backlogLost.count > 0)
      parts.push(
        `**${iso.backlogLost.count} of the backlog's reads got no result.** The ledger showed: ${iso.backlogLost.runs
          .map(
            (l) =>
              `${l.workflowId} ${l.state ?? 'no run'}${l.stopReason ? ` (${l.stopReason})` : ''}, proposal ${l.proposalStatus ?? 'none'}`,
          )
          .join('; ')}.`,
      );
  }

  if (rp) {
    parts.push(`## Duplicate-delivery replay (${rp.actions} approved refunds, ${rp.executors} executors, jitter 0–${rp.jitterMs} ms)`);
    parts.push(
      markdownTable(
        ['run', 'jobs finished', 'time ms', 'jobs/s', 'effects', 'refund POSTs', 'approvals used', 'failed', 'pg RT', 'outcomes'],
        [rp.clean, rp.duplicate].map((x) => [
          `${x.deliveries}× delivered`,
          x.completed ? `${x.jobs}` : `${x.finishedJobs} of ${x.jobs} (budget out)`,
          x.durationMs,
          x.jobsPerSec,
          x.effects,
          x.downstreamPosts,
          x.approvalsUsed,
          x.failed,
          x.counts.pg,
          list(x.outcomes),
        ]),
      ),
    );
    parts.push(
      `per action with all its deliveries: time ${rp.costRatio}×, pg round trips ${rp.pgRatio}× the clean run; exactly once (complete): ${rp.exactlyOnce}; no duplicate effect: ${rp.noDuplicateEffects}; time budget ${Math.round(rp.budgetMs / 1000)} s`,
    );
    parts.push('Postgres backends during the replay runs:');
    parts.push(
      markdownTable(
        ['run', 'busy backends', 'waits'],
        [rp.clean, rp.duplicate].map((x) => [
          `${x.deliveries}×`,
          x.pgWaits.activeMean,
          Object.entries(x.pgWaits.waits)
            .map(([k, v]) => `${k} ${pct(v)}`)
            .join(', '),
        ]),
      ),
    );
  }

  if (e2e) {
    parts.push(`## End-to-end tickets (${e2e.tickets} tickets, ${e2e.concurrency} in flight, model-stub zero think time)`);
    parts.push(
      markdownTable(
        ['tickets/s', 'p50 ms', 'p99 ms', 'ledger p50 ms', 'states', 'refunds'],
        [[e2e.load.opsPerSec, e2e.load.latency.p50, e2e.load.latency.p99, e2e.ledgerLatency.p50, list(e2e.states), e2e.effects]],
      ),
    );
    parts.push(
      `Audit events unchained at the start: ${e2e.auditBacklogAtStart.events} (oldest ${e2e.auditBacklogAtStart.oldestAgeMs ?? 0} ms); jobs retried after a backoff: ${list(e2e.retriedJobs) || 'none'}`,
    );
    parts.push('Per ticket, summed over its jobs:');
    parts.push(stageTable(e2e.stages));
  }

  const t = r.telemetry;
  if (t) {
    parts.push(`## Telemetry on vs off (${t.what})`);
    parts.push(
      markdownTable(
        ['phase', 'telemetry', 'start ms', 'warm-up calls', 'c=1 calls', 'c=1 p50 ms', 'c=1 p90 ms', 'c=8 calls/s', 'services CPU ms/call'],
        t.phases.map((p, i) => [
          i + 1,
          p.telemetry,
          p.startMs,
          p.warmUpCalls,
          p.c1.ops,
          p.c1.latency.p50,
          p.c1.latency.p90,
          p.c8.opsPerSec,
          p.cpuMsPerCall ?? '–',
        ]),
      ),
    );
    parts.push(
      `On/off, each on phase against the off phases around it, median over ${(t.phases.length - 1) / 2} rounds: p50 ×${t.p50Ratio ?? '–'}, throughput ×${t.throughputRatio ?? '–'}, services' CPU per call ×${t.cpuRatio ?? '–'} (issue #14: cost under 10 %), start-up until ready ×${t.startRatio ?? '–'} (paid once per process); the stand-in collector took ${t.exports.traces} span and ${t.exports.metrics} metric exports (${t.exports.bytes} bytes). CPU per call on/off by service: ${Object.entries(
        t.cpuRatioByService,
      )
        .map(([name, x]) => `${name} ×${x ?? '–'}`)
        .join(', ')}.`,
    );
  }

  parts.push('## Peak RSS (MB, VmHWM over the whole run)');
  parts.push(
    markdownTable(
      ['process', 'peak RSS MB'],
      Object.entries(r.memory).map(([k, v]) => [k, v]),
    ),
  );

  if (r.policy) {
    parts.push('## Policy decisions (support-p1, tinybench)');
    parts.push(
      markdownTable(
        ['task', 'ledger refunds', 'decisions/s', 'p50 ms', 'p99 ms', 'samples', 'decisions'],
        [r.policy.pure, ...r.policy.withLedger].map((t) => [
          t.name,
          t.ledgerRefunds,
          t.decisionsPerSec,
          t.p50,
          t.p99,
          t.samples,
          list(t.decisions),
        ]),
      ),
    );
    parts.push('Each ledger sum of a decision alone (p50 / p99 ms):');
    const sums = [...new Set(r.policy.withLedger.flatMap((t) => Object.keys(t.parts ?? {})))];
    parts.push(
      markdownTable(
        ['ledger refunds', ...sums],
        r.policy.withLedger.map((t) => [
          t.ledgerRefunds,
          ...sums.map((n) => (t.parts?.[n] ? `${t.parts[n].p50} / ${t.parts[n].p99}` : null)),
        ]),
      ),
    );
  }

  parts.push('## Targets (reported, not asserted)');
  parts.push(
    markdownTable(
      ['target', 'measured', 'met', 'note'],
      r.targets.map((t) => [t.target, t.value, t.met ? 'yes' : 'MISSED', t.note]),
    ),
  );
  if (Object.keys(r.errors).length) {
    parts.push('## Errors');
    parts.push(
      markdownTable(
        ['section', 'error'],
        Object.entries(r.errors).map(([k, v]) => [k, v.slice(0, 300)]),
      ),
    );
  }
  return parts.join('\n\n') + '\n';
}

/** The headline figures with their floors (the README's Performance table). */
export function summaryTable(r: BenchReport): string {
  const { floor: f, replay: rp } = r;
  const { read, refund, approved } = r.governed;
  const policy = [...(r.policy?.withLedger ?? [])].sort((a, b) => b.ledgerRefunds - a.ledgerRefunds)[0];
  const services = Object.entries(r.memory).filter(([k]) => k !== 'bench');
  const rows: Cell[][] = [
    ['governed read (lookup_order), c=1 p50 ms', read?.c1.latency.p50, read?.floorMs, read?.ratioToFloor],
    ['governed refund ALLOW, c=1 p50 ms', refund?.c1.latency.p50, refund?.floorMs, refund?.ratioToFloor],
    ['approved refund (decision → result), c=1 p50 ms', approved?.c1.latency.p50, approved?.floorMs, approved?.ratioToFloor],
    ['governed read, c=50 calls/s', read?.c50.opsPerSec, f.pipeline50.opsPerSec, read?.throughputVsPipeline],
    ['governed refund ALLOW, c=50 calls/s', refund?.c50.opsPerSec, f.pipeline50.opsPerSec, refund?.throughputVsPipeline],
  ];
  for (const p of r.scaling ?? [])
    rows.push([
      `  9 tenants, ${p.executors} executor process(es)`,
      p.load.opsPerSec,
      f.pipeline50.opsPerSec,
      Math.round((p.load.opsPerSec / f.pipeline50.opsPerSec) * 1000) / 1000,
    ]);
  if (r.isolation)
    rows.push([
      `a quiet tenant's read, c=1 p50 ms, behind another tenant's ${r.isolation.backlog} reads (floor: alone)`,
      r.isolation.loaded.latency.p50,
      r.isolation.alone.latency.p50,
      r.isolation.slowdown,
    ]);
  if (rp) {
    const cut = rp.clean.completed && rp.duplicate.completed ? '' : '; the budget cut the run';
    const per = (x: typeof rp.clean): number => Math.round((x.durationMs / Math.max(1, x.finishedJobs)) * x.deliveries * 10) / 10;
    rows.push([
      `replay ${rp.actions} × ${rp.duplicate.deliveries} deliveries: ms per action (floor: delivered once${cut})`,
      per(rp.duplicate),
      per(rp.clean),
      rp.costRatio,
    ]);
    rows.push([
      `replay: refunds at the payments ledger (keys with two: ${rp.clean.duplicateEffects + rp.duplicate.duplicateEffects}${rp.duplicate.completed ? '' : `; ${rp.duplicate.finishedJobs} of ${rp.duplicate.jobs} jobs ran`})`,
      rp.duplicate.effects,
      rp.actions,
      null,
    ]);
  }
  if (r.e2e)
    rows.push([
      `end-to-end tickets/s (${r.e2e.concurrency} in flight), p50 ms ${r.e2e.load.latency.p50}`,
      r.e2e.load.opsPerSec,
      null,
      null,
    ]);
  rows.push(['max service peak RSS, MB (target 200)', services.length ? Math.max(...services.map(([, v]) => v)) : null, null, null]);
  if (policy) rows.push([`policy decision p99 ms, ${policy.ledgerRefunds} refunds in ledger (target 2)`, policy.p99, null, null]);
  return markdownTable(['measure', 'Gatehouse', 'floor', 'ratio'], rows);
}

function fmtCounts(c: { pg: number; begin: number; redis: number; http: number } | undefined): string {
  return c ? `${c.pg} / ${c.begin} / ${c.redis} / ${c.http}` : '–';
}
