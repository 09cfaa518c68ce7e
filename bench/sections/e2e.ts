import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { queueName } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import type { BenchSizes } from '../config.ts';
import { closedLoop, Waiters, type LoadResult } from '../lib/driver.ts';
import { REQUESTER } from '../lib/seed.ts';
import { dominantStage, jobTimes, StageBreakdown, type StageSummary } from '../lib/stages.ts';
import { Latencies, type LatencySummary } from '../lib/stats.ts';
import { AUTH_SECRET, RELEASE, type BenchWorld } from '../lib/world.ts';

/** Tickets through every service as a process, the model-stub answering with zero think time. */
export interface E2EReport {
  /** Tickets submitted (the time box may end the run before all of `tickets` in the sizes). */
  tickets: number;
  concurrency: number;
  /** Submit → workflow observed finished (polled every 25 ms), and tickets per second. */
  load: LoadResult;
  /** Ledger time of a ticket: workflow created → last update (completed), ms. */
  ledgerLatency: LatencySummary;
  /** Final workflow state → tickets (all should be `completed`). */
  states: Record<string, number>;
  /** Refunds at the payments ledger on the tickets' orders (one per ticket). */
  effects: number;
  /** Per ticket: time waiting in and processing of each queue (summed over the ticket's jobs). */
  stages: Record<string, StageSummary>;
  dominant: string;
  /** Jobs of the tickets that needed more than one attempt (retried after a backoff), by queue. */
  retriedJobs: Record<string, number>;
  /** Audit events not yet chained when the tickets started (what earlier sections left behind). */
  auditBacklogAtStart: { events: number; oldestAgeMs: number | null };
}

const FINAL = ['completed', 'stopped', 'needs_reconciliation'] as const;

/**
 * Hands the `results` queue to the real agent loop (the benchmark's stand-in consumer stops),
 * starts model-stub and agent-loop, and submits `tickets` act-mode tickets of rep-ana, each
 * "Refund $0.10 on order <its own order>, it arrived broken." — the obedient planner looks the
 * order up, issues the refund (allowed: under the auto limit) and answers: three model turns and
 * two governed calls per ticket, `ticketConcurrency` tickets in flight.
 */
export async function runE2E(w: BenchWorld, sizes: BenchSizes, orders: string[]): Promise<E2EReport> {
  const backlog = await sql<{ n: string; age: number | null }>`
    SELECT count(*) AS n, extract(epoch FROM now() - min(created_at)) * 1000 AS age FROM audit_outbox`.execute(w.db);
  const auditBacklogAtStart = {
    events: Number(backlog.rows[0]?.n ?? 0),
    oldestAgeMs: backlog.rows[0]?.age == null ? null : Math.round(Number(backlog.rows[0].age)),
  };
  await w.stopResultsConsumer();
  await w.startService('model-stub');
  await w.startService('agent-loop');
  const token = await tokenFor(REQUESTER, AUTH_SECRET);
  const intake = `${w.url('agent-loop')}/v1/tickets`;
  const finished = new Waiters<string>();
  const pending = new Set<string>();
  let polling = true;
  const poller = (async () => {
    while (polling) {
      if (pending.size) {
        const rows = await w.db
          .selectFrom('workflows')
          .select(['id', 'state'])
          .where('id', 'in', [...pending])
          .where('state', 'in', FINAL)
          .execute();
        for (const r of rows) {
          pending.delete(r.id);
          finished.settle(r.id, r.state);
        }
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  const workflowIds: string[] = [];
  const run = randomBytes(3).toString('hex');
  const ticket = async (i: number): Promise<void> => {
    const res = await fetch(intake, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ticketId: `BT-${run}-${i}`, text: `Refund $0.10 on order ${orders[i]}, it arrived broken.`, mode: 'act' }),
    });
    if (res.status !== 202) throw new Error(`intake → ${res.status} ${await res.text()}`);
    const { workflowId } = (await res.json()) as { workflowId: string };
    workflowIds.push(workflowId);
    pending.add(workflowId);
    await finished.wait(workflowId, 120_000);
  };
  const load = await closedLoop(sizes.tickets, sizes.ticketConcurrency, ticket, { maxMs: sizes.loadMaxMs });
  polling = false;
  await poller;
  w.notePeakRss();

  const wfs = workflowIds.length
    ? await w.db.selectFrom('workflows').select(['id', 'state', 'created_at', 'updated_at']).where('id', 'in', workflowIds).execute()
    : [];
  const states: Record<string, number> = {};
  const ledgerLatency = new Latencies();
  for (const r of wfs) {
    states[r.state] = (states[r.state] ?? 0) + 1;
    ledgerLatency.record(new Date(r.updated_at).getTime() - new Date(r.created_at).getTime());
  }
  let effects = 0;
  for (const orderId of orders.slice(0, load.ops)) {
    const body = (await (await fetch(`${w.url('staging')}/ledger/refunds?orderId=${orderId}`)).json()) as { refunds: unknown[] };
    effects += body.refunds.length;
  }
  const { stages, retriedJobs } = await ticketStages(w, wfs);
  return {
    tickets: load.ops,
    concurrency: sizes.ticketConcurrency,
    load,
    ledgerLatency: ledgerLatency.summary(),
    states,
    effects,
    stages,
    dominant: dominantStage(stages),
    retriedJobs,
    auditBacklogAtStart,
  };
}

/** Sums, per ticket, the queue wait and processing time of its turns, proposals, executions and results jobs. */
async function ticketStages(
  w: BenchWorld,
  wfs: Array<{ id: string; created_at: Date | string }>,
): Promise<{ stages: Record<string, StageSummary>; retriedJobs: Record<string, number> }> {
  const retriedJobs: Record<string, number> = {};
  if (!wfs.length) return { stages: {}, retriedJobs };
  const ids = wfs.map((x) => x.id);
  const wf = await w.db.selectFrom('workflows').select(['id', 'round']).where('id', 'in', ids).execute();
  const props = await w.db.selectFrom('proposals').select(['id', 'workflow_id', 'call_id']).where('workflow_id', 'in', ids).execute();
  const acts = await w.db.selectFrom('actions').select(['id', 'workflow_id', 'version']).where('workflow_id', 'in', ids).execute();
  const perWf = new Map<string, Record<string, number>>();
  const add = (wfId: string, stage: string, ms: number): void => {
    const m = perWf.get(wfId) ?? {};
    m[stage] = (m[stage] ?? 0) + ms;
    perWf.set(wfId, m);
  };
  const collect = async (base: string, owner: Map<string, string>, work: string): Promise<void> => {
    const times = await jobTimes(w.queues.get(queueName(base, RELEASE)), [...owner.keys()]);
    for (const [jobId, t] of times) {
      const wfId = owner.get(jobId)!;
      if (t.attemptsMade > 1) retriedJobs[base] = (retriedJobs[base] ?? 0) + 1;
      if (!t.processedOn) continue;
      add(wfId, `queue wait: ${base}`, t.processedOn - t.timestamp);
      if (t.finishedOn) add(wfId, work, t.finishedOn - t.processedOn);
    }
  };
  await collect(
    'turns',
    new Map(wf.flatMap((x) => Array.from({ length: x.round }, (_, r) => [`turn_${x.id}_r${r + 1}`, x.id] as const))),
    'agent-loop: turns (model call + record)',
  );
  await collect('proposals', new Map(props.map((p) => [`proposal_${p.id}`, p.workflow_id])), 'policy-gateway: decide');
  await collect('executions', new Map(acts.map((a) => [`exec_${a.id}_v${a.version}`, a.workflow_id])), 'executor: execute');
  await collect(
    'results',
    new Map(props.map((p) => [`result_${p.workflow_id}_${p.call_id}`, p.workflow_id])),
    'agent-loop: results (record output)',
  );
  const s = new StageBreakdown();
  for (const m of perWf.values()) for (const [stage, ms] of Object.entries(m)) s.add(stage, ms);
  return { stages: s.summary(), retriedJobs };
}
