import { call } from '@gatehouse/cli';
import { isTerminal, verifyAuditChain } from '@gatehouse/ledger';
import { runReconciliation } from '@gatehouse/reconciliation';
import { auditPublicKey } from '@gatehouse/cli';
import type { ChaosStack } from './chaos-stack.ts';
import type { Run } from './load.ts';

/** Where a run stands, read from the ledger. */
export interface RunState {
  ticketId: string;
  workflowId: string | null;
  state: string;
  stopReason: string | null;
  nextStep: string | null;
  /** True when an approval of the run waits for a person's decision. */
  pendingApproval: boolean;
  /** Operations of the run claimed and not yet recorded (`running`): an effect may be in flight. */
  running: number;
}

/**
 * Settled: no operation of the run still `running` (an effect whose outcome the executor has not
 * recorded yet — after a fault, its lease expires and it is claimed again and read back), and
 * terminal, or parked with a next step a person owns — `paused` with its next step (a tool
 * switched off), or `awaiting_approval` with an approval still pending. A run waiting on anything
 * else after recovery (a lost job, a held execution whose hold has lifted) is stuck.
 */
export function isSettled(r: RunState): boolean {
  if (r.running > 0) return false;
  if (isTerminal(r.state)) return true;
  if (r.state === 'paused') return Boolean(r.nextStep);
  return r.state === 'awaiting_approval' && r.pendingApproval;
}

/** The ledger's view of each run (`not_accepted` when intake never accepted it). */
export async function runStates(s: ChaosStack, runs: readonly Run[]): Promise<RunState[]> {
  const ids = runs.flatMap((r) => (r.workflowId ? [r.workflowId] : []));
  const rows = ids.length
    ? await s.db.selectFrom('workflows').select(['id', 'state', 'stop_reason', 'next_step']).where('id', 'in', ids).execute()
    : [];
  const pending = ids.length
    ? await s.db.selectFrom('approvals').select('workflow_id').where('workflow_id', 'in', ids).where('status', '=', 'pending').execute()
    : [];
  const waiting = new Set(pending.map((p) => p.workflow_id));
  const claimed = ids.length
    ? await s.db.selectFrom('operations').select('workflow_id').where('workflow_id', 'in', ids).where('status', '=', 'running').execute()
    : [];
  const running = new Map<string, number>();
  for (const o of claimed) running.set(o.workflow_id, (running.get(o.workflow_id) ?? 0) + 1);
  const byId = new Map(rows.map((w) => [w.id, w]));
  return runs.map((r) => {
    const w = r.workflowId ? byId.get(r.workflowId) : undefined;
    return {
      ticketId: r.ticketId,
      workflowId: r.workflowId,
      state: w?.state ?? 'not_accepted',
      stopReason: w?.stop_reason ?? r.lastError,
      nextStep: w?.next_step ?? null,
      pendingApproval: r.workflowId !== null && waiting.has(r.workflowId),
      running: (r.workflowId && running.get(r.workflowId)) || 0,
    };
  });
}

/**
 * Polls (every second) until every run is settled ({@link isSettled}) or `deadlineMs` (epoch
 * ms) passes; returns the runs not settled then. Ledger read errors (mid-fault) are retried.
 */
export async function waitSettled(s: ChaosStack, runs: readonly Run[], deadlineMs: number): Promise<RunState[]> {
  let stuck: RunState[] = [];
  for (;;) {
    try {
      stuck = (await runStates(s, runs)).filter((r) => !isSettled(r));
      if (stuck.length === 0) return [];
    } catch {
      // the ledger is not reachable yet
    }
    if (Date.now() > deadlineMs) return stuck;
    await new Promise((done) => setTimeout(done, 1000));
  }
}

/** A part of the load that moves runs while it runs (the lead approving); `stop` returns once its last round is done. */
export interface LoadActor {
  stop: () => Promise<void>;
}

/**
 * Waits until the runs are settled ({@link waitSettled}) with the load still acting, then stops
 * `actors` and waits again, so the checks read runs nothing moves any more. A run settled on a
 * person's wait (`awaiting_approval`, its approval pending) is moved by the approver a moment
 * later; judged settled while the approver runs, it was read by the checks in the middle of the
 * execution that approval started — a refund at the payments ledger, its action still `running`
 * (docs/decisions/0672-chaos-checks-read-a-stopped-load.md). Returns the runs not settled by
 * `deadlineMs`.
 */
export async function settleForChecks(
  s: ChaosStack,
  runs: readonly Run[],
  actors: readonly LoadActor[],
  deadlineMs: number,
): Promise<RunState[]> {
  await waitSettled(s, runs, deadlineMs);
  for (const actor of actors) await actor.stop();
  return waitSettled(s, runs, deadlineMs);
}

/** Effects at the systems of record compared with the runs' actions. */
export interface EffectCheck {
  /** Effects beyond one per action that may have run (succeeded or outcome unknown), and repeated keys. */
  duplicates: string[];
  /** Runs whose effects differ from their succeeded actions (missing, or an effect whose step is not `succeeded`). */
  mismatches: string[];
}

type Effect = { idempotencyKey?: string };
const EFFECT_READS: Record<string, (orderId: string) => string> = {
  issue_refund: (o) => `/ledger/refunds?orderId=${o}`,
  reship_order: (o) => `/orders/${o}/shipments`,
  notify_customer: (o) => `/mail/messages?orderId=${o}`,
};

async function readEffects(s: ChaosStack, tool: string, orderId: string): Promise<Effect[]> {
  const r = await call('GET', `${s.url('staging')}${EFFECT_READS[tool]!(orderId)}`, null);
  if (r.status !== 200) throw new Error(`staging read-back ${tool} ${orderId}: ${r.status}`);
  const body = r.body as Record<string, Effect[] | undefined>;
  return body.refunds ?? body.shipments ?? body.messages ?? [];
}

/**
 * Reads back every run's order at the staging systems (payments ledger `GET
 * /ledger/refunds?orderId=`, shipments, mail) and compares with the run's actions: exactly one
 * refund per idempotency key, each key an operation key of the run, and as many refunds,
 * shipments and emails as succeeded actions of that tool. Each run has an order of its own.
 * @throws Error when staging cannot be read.
 */
export async function checkEffects(s: ChaosStack, runs: readonly Run[]): Promise<EffectCheck> {
  const out: EffectCheck = { duplicates: [], mismatches: [] };
  for (const run of runs) {
    if (!run.workflowId) continue;
    const actions = await s.db
      .selectFrom('actions')
      .select(['tool', 'status', 'operation_key'])
      .where('workflow_id', '=', run.workflowId)
      .execute();
    for (const tool of Object.keys(EFFECT_READS)) {
      const mine = actions.filter((a) => a.tool === tool);
      const effects = await readEffects(s, tool, run.orderId);
      const succeeded = mine.filter((a) => a.status === 'succeeded').length;
      const mayHaveRun = succeeded + mine.filter((a) => a.status === 'failed_unknown').length;
      const keys = effects.flatMap((e) => (e.idempotencyKey ? [e.idempotencyKey] : []));
      const known = new Set(mine.map((a) => a.operation_key));
      const repeated = keys.length - new Set(keys).size;
      const foreign = keys.filter((k) => !known.has(k)).length;
      if (repeated > 0) out.duplicates.push(`${run.ticketId} ${tool}: ${repeated} repeated idempotency key(s)`);
      if (foreign > 0) out.duplicates.push(`${run.ticketId} ${tool}: ${foreign} effect(s) under a key of no action of the run`);
      if (effects.length > mayHaveRun)
        out.duplicates.push(`${run.ticketId} ${tool}: ${effects.length} effects for ${mayHaveRun} action(s)`);
      if (effects.length !== succeeded)
        out.mismatches.push(
          `${run.ticketId} ${tool}: ${effects.length} effect(s), ${succeeded} succeeded action(s) (${mine.map((a) => a.status).join(',')})`,
        );
    }
  }
  return out;
}

/** The audit chain after a fault. */
export interface ChainCheck {
  intact: boolean;
  events: number;
  /** Events still waiting in the audit outbox when the deadline passed (0: all chained). */
  backlog: number;
  reason: string | null;
}

/**
 * Waits (until `deadlineMs`) for the audit service to chain every outboxed event, then walks the
 * chain and its anchors against the audit service's pinned key (`gatehouse audit verify`).
 */
export async function checkAuditChain(s: ChaosStack, deadlineMs: number): Promise<ChainCheck> {
  let backlog = 0;
  for (;;) {
    const row = await s.db
      .selectFrom('audit_outbox')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    backlog = Number(row.n);
    if (backlog === 0 || Date.now() > deadlineMs) break;
    await new Promise((done) => setTimeout(done, 250));
  }
  const v = await verifyAuditChain(s.db, { trustedPublicKey: auditPublicKey(s.env.AUDIT_SIGNING_KEY_PATH) });
  return { intact: v.intact, events: v.events, backlog, reason: v.reason };
}

/** What one reconciliation pass left open. */
export interface ReconCheck {
  /** Differences neither repaired nor explained (the live worklist), less items judged a kill's designed outcome. Zero is clean. */
  unexplained: number;
  /** Findings per non-matched class, e.g. `{in_flight_ledger_has_it: 1}`. */
  classes: Record<string, number>;
  /** Worklist items left open, as `class subject` (at most 5), for the report. */
  open: string[];
  /**
   * Items that are the designed outcome of a process killed between an effect's write-ahead
   * dispatch mark and its record: the downstream shows nothing, the reclaim after the lease
   * recorded `failed_unknown lease_expired_after_dispatch` rather than send again
   * (services/executor/src/jobs/steps/dispatch.step.ts), so a person owns it. Counted only when
   * the check is given `killedRuns` (the workflows of a case that killed the executor).
   */
  killedInDispatch: number;
}

/** The workflows whose operation the reclaim ended `failed_unknown` with `lease_expired_after_dispatch`. */
async function unknownAfterDispatch(s: ChaosStack, workflowIds: readonly string[]): Promise<Set<string>> {
  if (workflowIds.length === 0) return new Set();
  const ops = await s.db
    .selectFrom('operations')
    .select('key')
    .where('workflow_id', 'in', workflowIds)
    .where('status', '=', 'failed_unknown')
    .where('error', '=', 'lease_expired_after_dispatch')
    .execute();
  return new Set(ops.map((o) => o.key));
}

/** The approvals of `runs` counted by status, e.g. `approved 1, used 3` (for the report: who decided what). */
export async function approvalsOf(s: ChaosStack, runs: readonly Run[]): Promise<string> {
  const ids = runs.flatMap((r) => (r.workflowId ? [r.workflowId] : []));
  if (ids.length === 0) return 'none';
  const rows = await s.db
    .selectFrom('approvals')
    .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
    .where('workflow_id', 'in', ids)
    .groupBy('status')
    .orderBy('status')
    .execute();
  return rows.map((r) => `${r.status} ${r.n}`).join(', ') || 'none';
}

/** Per stack, worklist items already judged a kill's designed outcome (they stay open for a person; later cases on the stack skip them). */
const judgedKilled = new WeakMap<ChaosStack, Set<string>>();

/**
 * Runs one reconciliation pass (`packages/reconciliation`) over the ledger and the staging
 * read-backs. `killedRuns`: workflows of a case that killed the executor, whose
 * `in_flight_ledger_lacks_it` items on an operation left unknown after its dispatch are the
 * product working as designed ({@link ReconCheck.killedInDispatch}), not unexplained — in this
 * check and in later checks on the same stack.
 */
export async function checkReconciliation(s: ChaosStack, killedRuns: readonly string[] = []): Promise<ReconCheck> {
  const r = await runReconciliation({
    db: s.db,
    stagingUrl: s.url('staging'),
    hmacKey: s.env.GATEHOUSE_AUDIT_HMAC_KEY ?? 'local-audit-hmac-key-change-me',
    actor: 'chaos-suite',
  });
  const classes = Object.fromEntries(Object.entries(r.counts).filter(([c, n]) => c !== 'matched' && n > 0));
  const unknown = await unknownAfterDispatch(s, killedRuns);
  const judged = judgedKilled.get(s) ?? new Set<string>();
  judgedKilled.set(s, judged);
  const killed = r.worklist.filter(
    (i) => i.class === 'in_flight_ledger_lacks_it' && i.operation_key !== null && unknown.has(i.operation_key),
  );
  for (const i of killed) judged.add(i.id);
  const left = r.worklist.filter((i) => !judged.has(i.id));
  const open = left.slice(0, 5).map((i) => `${i.class} ${i.subject}`);
  return { unexplained: left.length, classes, open, killedInDispatch: killed.length };
}
