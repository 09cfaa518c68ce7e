import type { BenchSizes } from '../config.ts';
import { closedLoop, type LoadResult } from '../lib/driver.ts';
import { endSeededRuns, seedProposals, type SeededProposal } from '../lib/seed.ts';
import { nowMs, ratio, round } from '../lib/stats.ts';
import type { BenchWorld } from '../lib/world.ts';
import type { TenantOrders } from './scaling.ts';

/** A quiet tenant's governed reads alone and while another tenant's backlog drains (ADR 0500). */
export interface IsolationReport {
  quietTenant: string;
  busyTenant: string;
  /** The busy tenant's reads enqueued at once, before the quiet tenant's loaded run. */
  backlog: number;
  /** The quiet tenant's reads at concurrency 1 on an idle system. */
  alone: LoadResult;
  /** The same reads at concurrency 1 started right after the backlog was enqueued. */
  loaded: LoadResult;
  /** Loaded p50 over alone p50: 1 is perfect isolation; FIFO queues make it about the backlog's drain time over one call. */
  slowdown: number | null;
  /** The busy tenant's reads still unanswered when the quiet run ended (> 0: the quiet run was under load throughout). */
  backlogLeft: number;
  /** From enqueueing the backlog to its last answer (or the last wait's timeout), ms. */
  backlogDrainMs: number;
  /** The busy tenant's reads that got no result within {@link RESULT_TIMEOUT_MS}, with what the ledger says of each (at most 20). */
  backlogLost: { count: number; runs: LostRun[] };
}

/** A backlog read that got no result in time, as the ledger showed it right after the wait timed out. */
export interface LostRun {
  workflowId: string;
  callId: string;
  state: string | null;
  stopReason: string | null;
  nextStep: string | null;
  proposalStatus: string | null;
}

/** How long one read may take to reach the results queue, ms. */
const RESULT_TIMEOUT_MS = 180_000;

/** Seeds `n` governed reads (`lookup_order`) of `who` on their own orders. */
function seedReads(w: BenchWorld, who: TenantOrders, n: number): Promise<SeededProposal[]> {
  return seedProposals(
    w.db,
    Array.from({ length: n }, (_, i) => ({
      tool: 'lookup_order' as const,
      arguments: { orderId: who.orders[i % who.orders.length]! },
      mode: 'investigate' as const,
      actor: { tenant: who.tenant, user: who.user },
    })),
  );
}

/**
 * Tenant isolation in throughput: `isolation1` reads of the quiet tenant one at a time, first
 * alone, then right after the busy tenant put `isolationBacklog` reads on the same queues at
 * once. Every proposal is added as the agent loop's outbox relay adds it, with its tenant's fair
 * priority (`QueueRegistry.add`), so the figure is what tenant-fair queues give a quiet tenant.
 */
export async function runIsolation(w: BenchWorld, sizes: BenchSizes, busy: TenantOrders, quiet: TenantOrders): Promise<IsolationReport> {
  const [quietAlone, quietLoaded, backlog] = await Promise.all([
    seedReads(w, quiet, sizes.isolation1),
    seedReads(w, quiet, sizes.isolation1),
    seedReads(w, busy, sizes.isolationBacklog),
  ]);
  const start = async (c: SeededProposal, tenant: string): Promise<void> => {
    await w.propose(c, RESULT_TIMEOUT_MS, tenant);
  };
  const alone = await closedLoop(quietAlone.length, 1, (i) => start(quietAlone[i]!, quiet.tenant), { maxMs: sizes.loadMaxMs });

  const t0 = nowMs();
  let answered = 0;
  // Settled, not all-or-nothing: a lost read is counted and described, and never rejects unobserved
  // while the quiet run is still going.
  const drained = Promise.allSettled(backlog.map((c) => start(c, busy.tenant).then(() => answered++)));
  const loaded = await closedLoop(quietLoaded.length, 1, (i) => start(quietLoaded[i]!, quiet.tenant), { maxMs: sizes.loadMaxMs });
  const backlogLeft = backlog.length - answered;
  const settled = await drained;
  const lost = backlog.filter((_, i) => settled[i]!.status === 'rejected');
  const backlogDrainMs = round(nowMs() - t0);
  const backlogLost = { count: lost.length, runs: await describeLost(w, lost.slice(0, 20)) };
  await endSeededRuns(w.db, [
    ...quietAlone.slice(alone.ops).map((c) => c.workflowId),
    ...quietLoaded.slice(loaded.ops).map((c) => c.workflowId),
  ]);
  w.notePeakRss();
  return {
    quietTenant: quiet.tenant,
    busyTenant: busy.tenant,
    backlog: backlog.length,
    alone,
    loaded,
    slowdown: ratio(loaded.latency.p50, alone.latency.p50),
    backlogLeft,
    backlogDrainMs,
    backlogLost,
  };
}

/** What the ledger says of reads that got no result: the run's state and stop, the proposal's status. */
async function describeLost(w: BenchWorld, lost: SeededProposal[]): Promise<LostRun[]> {
  if (!lost.length) return [];
  const rows = await w.db
    .selectFrom('workflows as w')
    .leftJoin('proposals as p', (j) => j.onRef('p.workflow_id', '=', 'w.id'))
    .select(['w.id', 'w.state', 'w.stop_reason', 'w.next_step', 'p.call_id', 'p.status'])
    .where(
      'w.id',
      'in',
      lost.map((c) => c.workflowId),
    )
    .execute();
  return lost.map((c) => {
    const row = rows.find((r) => r.id === c.workflowId && (r.call_id === null || r.call_id === c.callId));
    return {
      workflowId: c.workflowId,
      callId: c.callId,
      state: row?.state ?? null,
      stopReason: row?.stop_reason ?? null,
      nextStep: row?.next_step ?? null,
      proposalStatus: row?.status ?? null,
    };
  });
}
