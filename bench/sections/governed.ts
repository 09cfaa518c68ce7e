import { sql } from 'kysely';
import { queueName } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import type { BenchSizes } from '../config.ts';
import { closedLoop, sleep, type LoadResult } from '../lib/driver.ts';
import { diffCounts, perMs, perOperation, total, type CountSnapshot } from '../lib/counters.ts';
import { endSeededRuns, seedApprovals, seedProposals, LEAD, type CallSpec } from '../lib/seed.ts';
import { dominantStage, jobTimes, StageBreakdown, type StageSummary } from '../lib/stages.ts';
import { nowMs, ratio, round } from '../lib/stats.ts';
import { sampleWaits, type WaitProfile } from '../lib/pg-waits.ts';
import { AUTH_SECRET, RELEASE, type BenchWorld } from '../lib/world.ts';
import type { FloorReport } from './floor.ts';

/** The governed calls measured: a read, an allowed refund, an approved refund. */
export type GovernedKind = 'read' | 'refund' | 'approved';

/** Postgres, Redis and HTTP round trips, transactions and queue hops of one governed call. */
export interface PerCall {
  /** Queue hops: jobs enqueued per call, by base queue (the first hop is the benchmark's own add). */
  hops: number;
  hopsByQueue: Record<string, number>;
  /** Explicit transactions (BEGIN … COMMIT) on the call's path: gateway, approval, executor. */
  transactions: number;
  /** Postgres statements (each a round trip, BEGIN/COMMIT included) on the call's path. */
  pgRoundTrips: number;
  /** Redis commands on the call's path (BullMQ's scripts count one each). */
  redisCommands: number;
  /** Outgoing HTTP requests on the call's path (order reads, the adapter's calls). */
  httpRequests: number;
  /** Everything counted, per service — audit's share is its amortized chaining work. */
  byService: CountSnapshot;
}

/** One governed call kind: latency at concurrency 1, throughput at 50, counted cost, stages. */
export interface GovernedReport {
  kind: GovernedKind;
  what: string;
  c1: LoadResult;
  c50: LoadResult;
  /** What our Postgres backends waited on during the concurrency-50 run. */
  pgWaits: WaitProfile;
  /** Final action status → calls (every call should end `succeeded`). */
  outcomes: Record<string, number>;
  perCall: PerCall;
  /** Raw floor of the call's own hops and transactions: hops × hop p50 + transactions × txn p50, ms. */
  floorMs: number;
  /** Concurrency-1 p50 over {@link floorMs}. */
  ratioToFloor: number | null;
  /** Concurrency-50 throughput over the raw 3-stage pipeline's at concurrency 50. */
  throughputVsPipeline: number | null;
  /** Where a concurrency-1 call spends its time (BullMQ and ledger timestamps). */
  stages: Record<string, StageSummary>;
  dominant: string;
}

const WHAT: Record<GovernedKind, string> = {
  read: 'lookup_order: proposal enqueued → function_call_output ready',
  refund: 'issue_refund 0.10 (ALLOW): proposal enqueued → result recorded and ready',
  approved: 'issue_refund 0.10 (R7, approved): approval decision → result recorded and ready',
};

const CRITICAL = ['policy-gateway', 'approval', 'executor'];

interface Call {
  workflowId: string;
  callId: string;
  proposalId?: string;
  approvalId?: string;
  digest?: string;
  /** Epoch ms when the approval decision was sent (approved calls). */
  sentAtMs?: number;
}

/**
 * Seeds `count` calls of `kind`, the `from`-th call of the run onwards (call i acts on
 * `orders[i % orders.length]`): approved refunds as pending approvals of 10 cents, reads and
 * allowed refunds as received proposals of 10 cents.
 */
async function seedCalls(w: BenchWorld, kind: GovernedKind, orders: string[], from: number, count: number): Promise<Call[]> {
  const orderOf = (i: number): string => orders[(from + i) % orders.length]!;
  if (kind === 'approved')
    return seedApprovals(
      w.db,
      count,
      Array.from({ length: count }, (_, i) => orderOf(i)),
      { amountCents: 10, approved: false },
    );
  return seedProposals(
    w.db,
    Array.from({ length: count }, (_, i): CallSpec => {
      const orderId = orderOf(i);
      return kind === 'read'
        ? { tool: 'lookup_order', arguments: { orderId }, mode: 'investigate' }
        : { tool: 'issue_refund', arguments: { orderId, amount: '0.10', reason: 'Customer reported: damaged item' }, mode: 'act' };
    }),
  );
}

/**
 * Measures one governed call kind against the running services: `warmup` calls, then
 * `<kind>1` calls one at a time (latency, counted round trips, stages) and `<kind>50` calls
 * with 50 in flight (throughput). Reads and allowed refunds start at the gateway's `proposals`
 * queue; approved refunds at the approval API's decision. Each call ends when its `results`
 * job reaches the benchmark's consumer (where the agent loop would turn it into the
 * `function_call_output`).
 */
export async function runGoverned(
  w: BenchWorld,
  sizes: BenchSizes,
  kind: GovernedKind,
  floor: FloorReport,
  orders: string[],
): Promise<GovernedReport> {
  const n1 = kind === 'read' ? sizes.read1 : kind === 'refund' ? sizes.refund1 : sizes.approved1;
  const n50 = kind === 'read' ? sizes.read50 : kind === 'refund' ? sizes.refund50 : sizes.approved50;
  const lead = await tokenFor(LEAD, AUTH_SECRET);
  const fire = async (c: Call): Promise<void> => {
    if (c.proposalId) {
      await w.propose({ ...c, proposalId: c.proposalId }, 60_000);
      return;
    }
    c.sentAtMs = Date.now();
    const res = await fetch(`${w.url('approval')}/v1/approvals/${c.approvalId}/decision`, {
      method: 'POST',
      headers: { authorization: `Bearer ${lead}`, 'content-type': 'application/json' },
      body: JSON.stringify({ decision: 'approve', actionVersion: 1, actionDigest: c.digest }),
    });
    if (!res.ok) throw new Error(`approval decision → ${res.status} ${await res.text()}`);
    await w.results.wait(`${c.workflowId}/${c.callId}`, 60_000);
  };
  // Each set is seeded just before its loop: seeded runs are live, and the executor's watchdog
  // looks at every live run past its grace on each pass, so runs seeded for c=50 would be swept
  // during the c=1 loop — load beside the timed call that no real run brings.
  const warm = await seedCalls(w, kind, orders, 0, sizes.warmup);
  await closedLoop(warm.length, 1, (i) => fire(warm[i]!));

  // Background rate of every service (sweeps, heartbeats) to subtract from the counts.
  const idleA = await w.counts();
  const ta = nowMs();
  await sleep(sizes.idleMs);
  const idleB = await w.counts();
  const idle = perMs(diffCounts(idleB, idleA), nowMs() - ta);

  const set1 = await seedCalls(w, kind, orders, sizes.warmup, n1);
  const outboxBefore = await outboxByQueue(w);
  const before = await w.counts(0);
  const t0 = nowMs();
  const c1 = await closedLoop(set1.length, 1, (i) => fire(set1[i]!), { maxMs: sizes.latencyMaxMs });
  const elapsed = nowMs() - t0;
  const after = await w.counts(450);
  const outboxAfter = await outboxByQueue(w);
  const fired1 = set1.slice(0, c1.ops);
  await endSeededRuns(
    w.db,
    set1.slice(c1.ops).map((c) => c.workflowId),
  );
  const byService = perOperation(diffCounts(after, before), idle, elapsed + 450, fired1.length);
  const path = total(byService, CRITICAL);
  const hopsByQueue: Record<string, number> = kind === 'approved' ? {} : { proposals: 1 };
  for (const [q, count] of Object.entries(outboxAfter)) {
    const d = (count - (outboxBefore[q] ?? 0)) / fired1.length;
    if (d > 0) hopsByQueue[q.split('.')[0]!] = round(d);
  }
  const hops = Object.values(hopsByQueue).reduce((s, x) => s + x, 0);
  const perCall: PerCall = {
    hops: round(hops),
    hopsByQueue,
    transactions: path.begin,
    pgRoundTrips: path.pg,
    redisCommands: path.redis,
    httpRequests: path.http,
    byService,
  };

  const set50 = await seedCalls(w, kind, orders, sizes.warmup + n1, n50);
  const sampler = sampleWaits(w.db, w.database!.name);
  const c50 = await closedLoop(set50.length, 50, (i) => fire(set50[i]!), { maxMs: sizes.loadMaxMs });
  const pgWaits = await sampler.stop();
  await endSeededRuns(
    w.db,
    set50.slice(c50.ops).map((c) => c.workflowId),
  );
  w.notePeakRss();
  const outcomes = await actionOutcomes(
    w,
    [...fired1, ...set50.slice(0, c50.ops)].map((c) => c.workflowId),
  );
  const stages = await callStages(w, kind, fired1);
  const floorMs = round(hops * floor.hop.p50 + path.begin * floor.txn.p50);
  return {
    kind,
    what: WHAT[kind],
    c1,
    c50,
    pgWaits,
    outcomes,
    perCall,
    floorMs,
    ratioToFloor: ratio(c1.latency.p50, floorMs),
    throughputVsPipeline: ratio(c50.opsPerSec, floor.pipeline50.opsPerSec),
    stages,
    dominant: dominantStage(stages),
  };
}

async function outboxByQueue(w: BenchWorld): Promise<Record<string, number>> {
  const r = await sql<{ queue: string; n: string }>`SELECT queue, count(*) AS n FROM outbox GROUP BY queue`.execute(w.db);
  return Object.fromEntries(r.rows.map((x) => [x.queue, Number(x.n)]));
}

/** Final status of version 1 of each workflow's action → count. */
export async function actionOutcomes(w: BenchWorld, workflowIds: string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (let i = 0; i < workflowIds.length; i += 1000) {
    const r = await w.db
      .selectFrom('actions')
      .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
      .where('workflow_id', 'in', workflowIds.slice(i, i + 1000))
      .where('version', '=', 1)
      .groupBy('status')
      .execute();
    for (const x of r) out[x.status] = (out[x.status] ?? 0) + Number(x.n);
  }
  return out;
}

/**
 * Splits each call into consecutive stages from BullMQ's job timestamps and the ledger's
 * (action created = start of the deciding transaction; operation dispatched = write-ahead
 * mark; operation updated = result recorded), all epoch ms of the same machine.
 */
async function callStages(w: BenchWorld, kind: GovernedKind, calls: Call[]): Promise<Record<string, StageSummary>> {
  const rows = await w.db
    .selectFrom('actions as a')
    .leftJoin('operations as o', 'o.action_id', 'a.id')
    .select(['a.workflow_id', 'a.id', 'a.created_at', 'o.dispatched_at', 'o.updated_at'])
    .where(
      'a.workflow_id',
      'in',
      calls.map((c) => c.workflowId),
    )
    .where('a.version', '=', 1)
    .execute();
  const byWf = new Map(rows.map((r) => [r.workflow_id, r]));
  const pJobs = await jobTimes(
    w.queues.get(queueName('proposals', RELEASE)),
    calls.filter((c) => c.proposalId).map((c) => `proposal_${c.proposalId}`),
  );
  const eJobs = await jobTimes(
    w.queues.get(queueName('executions', RELEASE)),
    rows.map((r) => `exec_${r.id}_v1`),
  );
  const rJobs = await jobTimes(
    w.queues.get(queueName('results', RELEASE)),
    calls.map((c) => `result_${c.workflowId}_${c.callId}`),
  );
  const s = new StageBreakdown();
  const ms = (d: Date | string | null | undefined): number | null => (d ? new Date(d).getTime() : null);
  for (const c of calls) {
    const a = byWf.get(c.workflowId);
    const e = a ? eJobs.get(`exec_${a.id}_v1`) : undefined;
    const r = rJobs.get(`result_${c.workflowId}_${c.callId}`);
    if (!a || !e || !r) continue;
    if (kind === 'approved') {
      s.add('approval API: decide + enqueue', e.timestamp - (c.sentAtMs ?? NaN));
    } else {
      const p = pJobs.get(`proposal_${c.proposalId}`);
      if (!p?.processedOn) continue;
      s.add('queue: proposals', p.processedOn - p.timestamp);
      s.add('gateway: reads + order fetch', ms(a.created_at)! - p.processedOn);
      s.add('gateway: decide txn + enqueue', e.timestamp - ms(a.created_at)!);
    }
    if (!e.processedOn || !r.processedOn) continue;
    s.add('queue: executions', e.processedOn - e.timestamp);
    s.add('executor: checks + claim txn', (ms(a.dispatched_at) ?? NaN) - e.processedOn);
    s.add('executor: adapter (staging HTTP)', (ms(a.updated_at) ?? NaN) - (ms(a.dispatched_at) ?? NaN));
    s.add('executor: record txn + enqueue', r.timestamp - (ms(a.updated_at) ?? NaN));
    s.add('queue: results', r.processedOn - r.timestamp);
  }
  return s.summary();
}
