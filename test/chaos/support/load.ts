import { sql } from 'kysely';
import { approveAsLead, call, tokenFor } from '@gatehouse/cli';
import type { ChaosStack } from './chaos-stack.ts';

/** Local HS256 secret of user tokens (the stack's default). */
const AUTH_SECRET = 'local-auth-secret-change-me';
/** Reps who submit (US region, so one US lead may decide every approval; both may refund). */
const REPS = ['rep-ana', 'rep-ben'] as const;

/** The lead who approves every pending approval. */
const LEAD = 'lead-eli';

/** What a run asks for; each needs one effect at a system of record. */
export type RunKind = 'refund_auto' | 'refund_approval' | 'reship_approval' | 'notify';

/**
 * The ticket of each kind (the model-stub's obedient planner reads it: lookup, then the step)
 * and the amount paid on its order, cents. An 80.00 refund is above the auto limit and a reship
 * of an order paid above 300.00 needs a lead: both wait for an approval.
 */
export const KINDS: Record<RunKind, { text: (orderId: string) => string; paidCents: number }> = {
  refund_auto: { text: (o) => `Refund $20 on order ${o}, it arrived late.`, paidCents: 20_000 },
  refund_approval: { text: (o) => `Refund $80 on order ${o}, it arrived broken.`, paidCents: 20_000 },
  reship_approval: { text: (o) => `Please reship order ${o}, the parcel was lost.`, paidCents: 40_000 },
  notify: { text: (o) => `Please email the customer of order ${o} about the late parcel.`, paidCents: 20_000 },
};
export const KIND_CYCLE: readonly RunKind[] = ['refund_auto', 'refund_approval', 'notify', 'reship_approval'];

/**
 * The rep of the `i`th run: the reps take the kind cycle in turns, a whole cycle each, so both
 * submit every kind. Alternating run by run gave one rep every approval refund ($160 of each
 * six-run case), and by the seventh kill case on the shared stack their $1,000 24 h limit (R5)
 * denied them.
 */
const repOf = (i: number): string => REPS[Math.floor(i / KIND_CYCLE.length) % REPS.length]!;

/** One ticket of the load, on an order of its own (so its effects are exactly its own). */
export interface Run {
  ticketId: string;
  user: string;
  kind: RunKind;
  orderId: string;
  /** Set once intake accepted it (202). */
  workflowId: string | null;
  /** Last intake failure while it was not accepted. */
  lastError: string | null;
}

let nextOrder = 2000;

/**
 * Plans `n` runs labelled `tag` (kinds in a fixed cycle) and creates an order for each in the
 * order system (`O-2000`… upward: the planner reads four-digit ids; world.json uses O-10xx).
 */
export async function planRuns(s: ChaosStack, tag: string, n: number): Promise<Run[]> {
  const runs: Run[] = [];
  for (let i = 0; i < n; i++) {
    const orderId = `O-${nextOrder++}`;
    if (nextOrder > 9999) throw new Error('out of four-digit order ids');
    const kind = KIND_CYCLE[i % KIND_CYCLE.length]!;
    await sql`insert into staging.orders (id, tenant, region, customer, paid_cents, status)
      values (${orderId}, 'quillfeather', 'US', 'cust-2', ${KINDS[kind].paidCents}, 'shipped')`.execute(s.staging.db);
    runs.push({ ticketId: `CH-${tag}-${i}`, user: repOf(i), kind, orderId, workflowId: null, lastError: null });
  }
  return runs;
}

/**
 * Submits `run` through intake (`POST /v1/tickets`, mode `act`), retrying every second until
 * accepted or `deadlineMs` (epoch ms): intake is idempotent per ticket id, so a retry after a
 * lost answer finds the same workflow. Never throws; an unaccepted run keeps its last error.
 */
export async function submitRun(s: ChaosStack, run: Run, deadlineMs: number): Promise<void> {
  const token = await tokenFor(run.user, AUTH_SECRET);
  const body = { ticketId: run.ticketId, text: KINDS[run.kind].text(run.orderId), mode: 'act' };
  while (run.workflowId === null) {
    try {
      const r = await call('POST', `${s.url('agent-loop')}/v1/tickets`, token, body);
      if (r.status === 202) run.workflowId = String(r.body.workflowId);
      else run.lastError = `intake ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
    } catch (err) {
      run.lastError = `intake unreachable: ${String(err)}`;
    }
    if (run.workflowId !== null || Date.now() > deadlineMs) return;
    await new Promise((done) => setTimeout(done, 1000));
  }
}

/**
 * Submits runs `perSecond` at a time per second (modest on 2 cores), each retried until
 * `deadlineMs`; resolves when every run was accepted or gave up.
 */
export async function submitRuns(s: ChaosStack, runs: Run[], deadlineMs: number, perSecond = 4): Promise<void> {
  const pending: Array<Promise<void>> = [];
  for (let i = 0; i < runs.length; i++) {
    pending.push(submitRun(s, runs[i]!, deadlineMs));
    if ((i + 1) % perSecond === 0) await new Promise((done) => setTimeout(done, 1000));
  }
  await Promise.all(pending);
}

/** The approver side of the load: a lead deciding every pending approval while it runs. */
export interface Approver {
  /** Approvals this lead approved (200). */
  approved: () => number;
  stop: () => Promise<void>;
}

/**
 * Starts a lead (lead-eli) who lists pending approvals every `intervalMs` and approves each of
 * `runs` with the version and digest read from the approval API, as the inbox does. Errors (a
 * service down mid-fault) are retried on the next round.
 *
 * Only approvals of `runs` are decided. The kill cases share one stack, and a run of an earlier
 * case may be left parked on its pending approval (settled, so that case's checks passed): a lead
 * approving everything would start its execution during a later case, which does not wait for it.
 * Killed in its dispatch window (the `kill -9 executor` case), that execution's lease expired
 * after the case's checks and its `failed_unknown` was blamed on the next cases.
 *
 * `stop` first waits (at most `drainMs`) for a round that read the list (200) and found nothing of
 * `runs` left to decide, so a case does not end with its runs parked on approvals the lead never
 * saw — as when the approval service was the one killed and came back after the runs settled.
 */
export function startApprover(s: ChaosStack, runs: readonly Run[], intervalMs = 500, drainMs = 60_000): Approver {
  let running = true;
  let approved = 0;
  let idleRounds = 0;
  const decided = new Set<string>();
  const round = async (token: string): Promise<void> => {
    const r = await call('GET', `${s.url('approval')}/v1/approvals?status=pending&limit=100`, token);
    const ours = new Set(runs.map((run) => run.workflowId));
    const pending = ((r.body.approvals ?? []) as Array<{ approvalId: string; workflowId: string }>).filter(
      (a) => ours.has(a.workflowId) && !decided.has(a.approvalId),
    );
    if (r.status === 200 && pending.length === 0) idleRounds++;
    for (const a of pending) {
      const d = await approveAsLead(s.url('approval'), token, a.approvalId);
      if (d.status === 200) {
        approved++;
        decided.add(a.approvalId);
      }
    }
  };
  const loop = (async () => {
    const token = await tokenFor(LEAD, AUTH_SECRET);
    while (running) {
      // the approval service or the ledger is down: try again next round
      await round(token).catch(() => undefined);
      await new Promise((done) => setTimeout(done, intervalMs));
    }
  })();
  // Two idle rounds from now: the second began after this call, so it listed every approval open now.
  const drained = async (): Promise<void> => {
    const before = idleRounds;
    for (const until = Date.now() + drainMs; idleRounds < before + 2 && Date.now() < until;)
      await new Promise((done) => setTimeout(done, intervalMs));
  };
  return {
    approved: () => approved,
    // Idempotent: the checks stop it, and the runner's `finally` again (no round runs then to drain).
    stop: async () => {
      if (running) await drained();
      running = false;
      await loop;
    },
  };
}
