import { jobOptionsFor, queueName } from '@gatehouse/contracts';
import type { BenchSizes } from '../config.ts';
import { closedLoop, type LoadResult } from '../lib/driver.ts';
import { endSeededRuns, seedProposals, type SeededProposal } from '../lib/seed.ts';
import { nowMs, ratio, round } from '../lib/stats.ts';
import { RELEASE, type BenchWorld } from '../lib/world.ts';
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
  /** From enqueueing the backlog to its last answer, ms. */
  backlogDrainMs: number;
}

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
  const name = queueName('proposals', RELEASE);
  const start = async (c: SeededProposal, tenant: string): Promise<void> => {
    const done = w.results.wait(`${c.workflowId}/${c.callId}`, 180_000);
    const payload = { release: RELEASE, workflowId: c.workflowId, proposalId: c.proposalId, callId: c.callId };
    await w.queues.add(name, 'proposal', payload, { ...jobOptionsFor(name), jobId: `proposal_${c.proposalId}` }, tenant);
    await done;
  };
  const alone = await closedLoop(quietAlone.length, 1, (i) => start(quietAlone[i]!, quiet.tenant), { maxMs: sizes.loadMaxMs });

  const t0 = nowMs();
  let answered = 0;
  const drained = Promise.all(backlog.map((c) => start(c, busy.tenant).then(() => answered++)));
  const loaded = await closedLoop(quietLoaded.length, 1, (i) => start(quietLoaded[i]!, quiet.tenant), { maxMs: sizes.loadMaxMs });
  const backlogLeft = backlog.length - answered;
  await drained;
  const backlogDrainMs = round(nowMs() - t0);
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
  };
}
