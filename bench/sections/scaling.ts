import type { BenchSizes } from '../config.ts';
import { closedLoop, type LoadResult } from '../lib/driver.ts';
import { queueName } from '@gatehouse/contracts';
import { cpuBetween, cpuSnapshot, type CpuUse } from '../lib/proc.ts';
import { sampleWaits, type WaitProfile } from '../lib/pg-waits.ts';
import { endSeededRuns, seedProposals } from '../lib/seed.ts';
import { dominantStage, jobTimes, StageBreakdown, type StageSummary } from '../lib/stages.ts';
import { ratio } from '../lib/stats.ts';
import { RELEASE, type BenchWorld } from '../lib/world.ts';

/** Throughput of governed refunds at concurrency 50 with 1, 2, 4… executor processes. */
export interface ScalingPoint {
  executors: number;
  load: LoadResult;
  /** Throughput over the 1-executor point. */
  speedup: number | null;
  /** CPU over the run: machine busy share and CPU seconds by party (services, postgres, redis, bench). */
  cpu: CpuUse;
  /** What our Postgres backends waited on during the run. */
  pgWaits: WaitProfile;
  /** Mean queue wait vs. processing per queue (ms): where the calls waited. */
  stages: Record<string, StageSummary>;
  dominant: string;
  /** CPU-bound when the machine is ≥ 90 % busy; the party that used the most CPU. */
  bottleneck: string;
}

/** The orders of one (tenant, rep) pair of the multi-tenant load. */
export interface TenantOrders {
  tenant: string;
  user: string;
  orders: string[];
}

/**
 * Runs `scaling` allowed refunds at concurrency 50 for each executor count in
 * `scalingExecutors`, spread round robin over `tenants` — one rep per tenant, each on their own
 * orders, as a multi-tenant runtime sees it (a single tenant and user would make every refund
 * compete for one user-day and tenant-hour limit, docs/decisions/0191) — starting extra executor
 * processes as needed, and reads CPU use of every party (services, our Postgres backends, the
 * Redis server, the benchmark itself) around each run.
 */
export async function runScaling(w: BenchWorld, sizes: BenchSizes, tenants: TenantOrders[]): Promise<ScalingPoint[]> {
  const points: ScalingPoint[] = [];
  for (const executors of sizes.scalingExecutors) {
    await w.setExecutors(executors);
    const calls = await seedProposals(
      w.db,
      Array.from({ length: sizes.scaling }, (_, i) => {
        const who = tenants[i % tenants.length]!;
        const orderId = who.orders[Math.floor(i / tenants.length) % who.orders.length]!;
        return {
          tool: 'issue_refund' as const,
          arguments: { orderId, amount: '0.10', reason: 'Customer reported: damaged item' },
          mode: 'act' as const,
          actor: { tenant: who.tenant, user: who.user },
        };
      }),
    );
    const a = await cpuSnapshot(w.pids(), w.db, w.database!.name, w.redis);
    const sampler = sampleWaits(w.db, w.database!.name);
    const result = await closedLoop(
      calls.length,
      50,
      async (i) => {
        await w.propose(calls[i]!, 120_000);
      },
      { maxMs: sizes.loadMaxMs },
    );
    const pgWaits = await sampler.stop();
    const b = await cpuSnapshot(w.pids(), w.db, w.database!.name, w.redis);
    await endSeededRuns(
      w.db,
      calls.slice(result.ops).map((c) => c.workflowId),
    );
    w.notePeakRss();
    const cpu = cpuBetween(a, b);
    const stages = await queueStages(w, calls.slice(0, result.ops));
    points.push({
      executors,
      load: result,
      speedup: null,
      cpu,
      pgWaits,
      stages,
      dominant: dominantStage(stages),
      bottleneck: verdict(cpu, pgWaits),
    });
  }
  const base = points[0]?.load.opsPerSec;
  for (const p of points) p.speedup = ratio(p.load.opsPerSec, base);
  return points;
}

/**
 * Where the bottleneck sits: a Postgres lock when most busy backends wait on one, else the CPU
 * when the machine is ≥ 90 % busy, else Redis when its server uses ≥ 80 % of a core; with the
 * figures behind it.
 */
export function verdict(cpu: CpuUse, pg: WaitProfile): string {
  const core = (s: number): number => Math.round((s / Math.max(0.01, cpu.wallS)) * 100);
  const top = Object.entries(cpu.seconds).sort((x, y) => y[1] - x[1])[0];
  const wait = Object.entries(pg.waits)[0];
  const redis = core(cpu.seconds.redis ?? 0);
  const lock = wait !== undefined && wait[0].startsWith('Lock:') && wait[1] >= 0.5;
  const which = lock
    ? `Postgres ${wait[0]}${wait[0] === 'Lock:advisory' ? ' (the refund limit locks)' : ''}`
    : cpu.machineBusy >= 0.9
      ? 'CPU'
      : redis >= 80
        ? 'Redis'
        : 'nothing saturated';
  return (
    `${which}: machine ${Math.round(cpu.machineBusy * 100)} % busy, top ${top?.[0]} ${core(top?.[1] ?? 0)} % of a core, ` +
    `Redis ${redis} % of a core; Postgres ${pg.activeMean} busy backends${wait ? `, ${Math.round(wait[1] * 100)} % ${wait[0]}` : ''}`
  );
}

/** Mean wait in and processing of each queue per call (from BullMQ timestamps). */
async function queueStages(
  w: BenchWorld,
  calls: Array<{ workflowId: string; proposalId: string; callId: string }>,
): Promise<Record<string, StageSummary>> {
  const actions = await w.db
    .selectFrom('actions')
    .select(['id', 'workflow_id'])
    .where(
      'workflow_id',
      'in',
      calls.map((c) => c.workflowId),
    )
    .where('version', '=', 1)
    .execute();
  const s = new StageBreakdown();
  const add = (name: string, t: Map<string, { timestamp: number; processedOn: number | null; finishedOn: number | null }>): void => {
    for (const j of t.values()) {
      if (!j.processedOn) continue;
      s.add(`queue wait: ${name}`, j.processedOn - j.timestamp);
      if (j.finishedOn && name !== 'results') s.add(`processing: ${name}`, j.finishedOn - j.processedOn);
    }
  };
  add(
    'proposals',
    await jobTimes(
      w.queues.get(queueName('proposals', RELEASE)),
      calls.map((c) => `proposal_${c.proposalId}`),
    ),
  );
  add(
    'executions',
    await jobTimes(
      w.queues.get(queueName('executions', RELEASE)),
      actions.map((a) => `exec_${a.id}_v1`),
    ),
  );
  add(
    'results',
    await jobTimes(
      w.queues.get(queueName('results', RELEASE)),
      calls.map((c) => `result_${c.workflowId}_${c.callId}`),
    ),
  );
  return s.summary();
}
