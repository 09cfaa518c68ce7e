import { sql, type Selectable } from 'kysely';
import { decidedOutOfBand } from '@gatehouse/contracts';
import type { Db, Trx } from './db.ts';
import type { WorkflowsTable } from './schema.ts';
import { LIVE_STATES, STATE_LIVENESS, type AwaitedJob } from './transitions.ts';

/** Contract queue base of each awaited job kind (`human` has none). */
export const QUEUE_OF: Readonly<Record<Exclude<AwaitedJob, 'human'>, string>> = {
  turn: 'turns',
  proposal: 'proposals',
  approval_request: 'approval-requests',
  execution: 'executions',
  result: 'results',
};

/**
 * One job a live run waits for, named by its deterministic id (docs/decisions/0006). `payload`
 * is what the ledger alone can rebuild it from (null for a result, whose model-safe output only
 * its outbox row holds).
 */
export interface AwaitedJobRef {
  kind: Exclude<AwaitedJob, 'human'>;
  /** Contract queue base (`executions`); the queue is `<base>.<release>`. */
  queue: string;
  /** Deterministic job id; an execution resumed by on-call also matches `<jobId>_resume<n>`. */
  jobId: string;
  payload: Record<string, unknown> | null;
}

/** What a live run needs to progress, read from the ledger only. */
export interface RunNeeds {
  /** Queue jobs of which each must exist (or have its effect recorded) for the run to progress. */
  jobs: AwaitedJobRef[];
  /** A legitimate wait on a person, with until when (epoch ms; Infinity for an on-call pause). */
  humanWait: { reason: string; untilMs: number } | null;
}

type Wf = Pick<Selectable<WorkflowsTable>, 'id' | 'state' | 'round' | 'release_id'>;

/** Calls of the transcript without a `function_call_output`, oldest first. */
async function unansweredCallIds(db: Db | Trx, workflowId: string): Promise<string[]> {
  const r = await sql<{ call_id: string }>`
    SELECT c.call_id FROM conversation_items c
    WHERE c.workflow_id = ${workflowId} AND c.kind = 'function_call'
      AND NOT EXISTS (SELECT 1 FROM conversation_items o
        WHERE o.workflow_id = c.workflow_id AND o.kind = 'function_call_output' AND o.call_id = c.call_id)
    ORDER BY c.id`.execute(db);
  return r.rows.map((x) => x.call_id);
}

const exec = (wf: Wf, a: { id: string; version: number }, approvalId: string | null): AwaitedJobRef => ({
  kind: 'execution',
  queue: QUEUE_OF.execution,
  jobId: `exec_${a.id}_v${a.version}`,
  payload: { release: wf.release_id, workflowId: wf.id, actionId: a.id, actionVersion: a.version, approvalId },
});

const result = (wf: Wf, callId: string): AwaitedJobRef => ({
  kind: 'result',
  queue: QUEUE_OF.result,
  jobId: `result_${wf.id}_${callId}`,
  payload: null,
});

const FINISHED_ACTION = new Set(['succeeded', 'failed', 'failed_unknown', 'denied', 'suppressed', 'superseded', 'compensated']);

/** The job (or person) one unanswered call waits for, following its proposal → action → approval. */
async function needsOfCall(db: Db | Trx, wf: Wf, callId: string, nowMs: number): Promise<RunNeeds> {
  const proposal = await db
    .selectFrom('proposals')
    .select(['id', 'status'])
    .where('workflow_id', '=', wf.id)
    .where('call_id', '=', callId)
    .orderBy('created_at', 'desc')
    .executeTakeFirst();
  if (!proposal) return { jobs: [], humanWait: null };
  if (proposal.status === 'received') {
    const payload = { release: wf.release_id, workflowId: wf.id, proposalId: proposal.id, callId };
    return { jobs: [{ kind: 'proposal', queue: QUEUE_OF.proposal, jobId: `proposal_${proposal.id}`, payload }], humanWait: null };
  }
  const action = await db
    .selectFrom('actions')
    .select(['id', 'version', 'status'])
    .where('workflow_id', '=', wf.id)
    .where('call_id', '=', callId)
    .orderBy('version', 'desc')
    .executeTakeFirst();
  if (!action || FINISHED_ACTION.has(action.status)) return { jobs: [result(wf, callId)], humanWait: null };
  const approval = await db
    .selectFrom('approvals')
    .select(['id', 'status', 'expires_at'])
    .where('action_id', '=', action.id)
    .where('action_version', '=', action.version)
    .orderBy('created_at', 'desc')
    .executeTakeFirst();
  if (action.status === 'pending_approval') {
    if (!approval) {
      const payload = { release: wf.release_id, workflowId: wf.id, actionId: action.id, actionVersion: action.version };
      const jobId = `approval_${action.id}_v${action.version}`;
      return { jobs: [{ kind: 'approval_request', queue: QUEUE_OF.approval_request, jobId, payload }], humanWait: null };
    }
    // Pending: a person decides until it expires; then the approval service's expiry sweep answers it.
    const untilMs = new Date(approval.expires_at).getTime();
    return { jobs: [], humanWait: { reason: `approval ${approval.id} pending`, untilMs: Math.max(untilMs, nowMs) } };
  }
  // approved, running (or normalized awaiting its execution): the execution must exist — unless it
  // already answered the call without finishing the action (a refusal): then its result must.
  const execution = exec(wf, action, approval?.status === 'approved' || approval?.status === 'used' ? approval.id : null);
  if (await answeredByExecution(db, execution.jobId, result(wf, callId).jobId)) return { jobs: [result(wf, callId)], humanWait: null };
  return { jobs: [execution], humanWait: null };
}

/**
 * Whether the call's result job (`resultJobId`) was written to the outbox after the newest row of
 * the action version's execution job (`execJobId`, or an on-call resume `<execJobId>_resume<n>`):
 * the execution answered the call and left the action unfinished — a refusal for the run's
 * deadline, an outage past its ceiling or an expired approval, whose stop its result carries. The
 * run then waits for that result, not for the execution: re-driving the execution again would only
 * write the same refusal under the same result id, which a queue still holding a completed job of
 * that id (a ledger promote that lost commits) drops every time
 * (docs/decisions/0793-a-result-the-execution-answered-is-awaited.md). Outbox ids come from one
 * sequence and a call's result row is written by an execution that ran after its job's row, so the
 * ids' order is the order of the writes (on the ledger's current timeline). Reads the ledger only.
 */
async function answeredByExecution(db: Db | Trx, execJobId: string, resultJobId: string): Promise<boolean> {
  const r = await sql<{ answered: boolean }>`
    SELECT coalesce((SELECT max(id) FROM outbox WHERE job_id = ${resultJobId}), 0)
         > coalesce((SELECT max(id) FROM outbox WHERE job_id = ${execJobId} OR job_id LIKE ${`${execJobId}\\_resume%`}), 0) AS answered`.execute(
    db,
  );
  return r.rows[0]?.answered === true;
}

/**
 * What a live run waits for (the progress rule of {@link STATE_LIVENESS}, made concrete): for
 * each unanswered call the job its pipeline is at — proposal, approval request, a pending
 * approval (a person), the execution of an approved action, the result — or, with every call
 * answered, the next model turn (`turn_<id>_r<round+1>`); a `paused` run waits for on-call.
 * Reads only the ledger (`db` or a transaction). Terminal runs need nothing.
 */
export async function runNeeds(db: Db | Trx, wf: Wf, nowMs = Date.now()): Promise<RunNeeds> {
  if (!LIVE_STATES.includes(wf.state)) return { jobs: [], humanWait: null };
  if (wf.state === 'paused') return { jobs: [], humanWait: { reason: 'paused by a switched-off tool', untilMs: Infinity } };
  const calls = await unansweredCallIds(db, wf.id);
  const out: RunNeeds = { jobs: [], humanWait: null };
  for (const callId of calls) {
    const n = await needsOfCall(db, wf, callId, nowMs);
    out.jobs.push(...n.jobs);
    out.humanWait ??= n.humanWait;
  }
  if (calls.length) return out;
  // Every call answered. An approval granted for an answered call (the change pack's scheduled
  // plan) still needs its execution; a pending one is a person's wait; otherwise the next turn.
  const open = await db
    .selectFrom('approvals as ap')
    .innerJoin('actions as a', 'a.id', 'ap.action_id')
    .select(['ap.id', 'ap.status', 'ap.expires_at', 'ap.rule_id', 'a.id as action_id', 'a.version', 'a.status as action_status'])
    .where('ap.workflow_id', '=', wf.id)
    .where('ap.status', 'in', ['pending', 'approved'])
    .execute();
  for (const ap of open) {
    // An out-of-band approval (remediation, release override) is consumed by the command that
    // asked for it, never by an execution job: approved, it is still a person's wait until it expires.
    if (ap.status === 'pending' || decidedOutOfBand(ap.rule_id))
      out.humanWait ??= { reason: `approval ${ap.id} pending`, untilMs: Math.max(new Date(ap.expires_at).getTime(), nowMs) };
    else if (!FINISHED_ACTION.has(ap.action_status)) out.jobs.push(exec(wf, { id: ap.action_id, version: ap.version }, ap.id));
  }
  if (open.length) return out;
  const round = wf.round + 1;
  out.jobs.push({
    kind: 'turn',
    queue: QUEUE_OF.turn,
    jobId: `turn_${wf.id}_r${round}`,
    payload: { release: wf.release_id, workflowId: wf.id, round },
  });
  return out;
}

/** A live run with no progress for longer than its state allows (and no legitimate wait). */
export interface StuckRun {
  workflowId: string;
  state: string;
  /** Milliseconds since the run last changed state. */
  ageMs: number;
  boundMs: number;
  /** Job ids it waits for (`turn_…`, `exec_…`), empty when nothing can drive it. */
  waitingFor: string[];
  /** The watchdog's latest re-drive of this run (audit `run.redriven`), if any. */
  watchdog: { atMs: number; outcome: string; count: number } | null;
}

/**
 * Lists live runs whose last state change is older than their state's bound in
 * {@link STATE_LIVENESS} and that wait on no person (a pending approval before it expires, an
 * on-call pause): state, age, the jobs they wait for and what the watchdog did. For the ops
 * dashboard and `gatehouse reconcile`. `limit` (default 100) caps the rows, oldest first.
 */
export async function listStuckRuns(db: Db, nowMs = Date.now(), limit = 100): Promise<StuckRun[]> {
  const minBound = Math.min(...Object.values(STATE_LIVENESS).map((s) => s.boundMs));
  const candidates = await db
    .selectFrom('workflows')
    .select(['id', 'state', 'round', 'release_id', 'updated_at'])
    .where('state', 'in', LIVE_STATES)
    .where('updated_at', '<', new Date(nowMs - minBound))
    .orderBy('updated_at')
    .limit(limit)
    .execute();
  const out: StuckRun[] = [];
  for (const wf of candidates) {
    const boundMs = STATE_LIVENESS[wf.state as keyof typeof STATE_LIVENESS].boundMs;
    const ageMs = nowMs - new Date(wf.updated_at).getTime();
    if (ageMs <= boundMs) continue;
    const needs = await runNeeds(db, wf, nowMs);
    if (needs.humanWait && needs.humanWait.untilMs + boundMs > nowMs) continue;
    out.push({ workflowId: wf.id, state: wf.state, ageMs, boundMs, waitingFor: needs.jobs.map((j) => j.jobId), watchdog: null });
  }
  const redrives = await latestRedrives(
    db,
    out.map((r) => r.workflowId),
  );
  for (const r of out) r.watchdog = redrives.get(r.workflowId) ?? null;
  return out;
}

/**
 * The watchdog's re-drives of these runs, from the audit trail (chained and not yet chained):
 * latest time and outcome, and how many. Empty input reads nothing.
 */
export async function latestRedrives(
  db: Db | Trx,
  workflowIds: string[],
): Promise<Map<string, { atMs: number; outcome: string; count: number }>> {
  const out = new Map<string, { atMs: number; outcome: string; count: number }>();
  if (!workflowIds.length) return out;
  const r = await sql<{ run_id: string; at_ms: string; outcome: string; n: string }>`
    SELECT run_id, max(at_ms) AS at_ms, (array_agg(outcome ORDER BY at_ms DESC))[1] AS outcome, count(*) AS n
    FROM (
      SELECT event->>'runId' AS run_id, (event->>'atMs')::bigint AS at_ms, event->>'outcome' AS outcome
        FROM audit_outbox WHERE event->>'type' = 'run.redriven'
      UNION ALL
      SELECT event->>'runId', (event->>'atMs')::bigint, event->>'outcome'
        FROM audit_log WHERE event->>'type' = 'run.redriven'
    ) e
    WHERE run_id IN (${sql.join(workflowIds)})
    GROUP BY run_id`.execute(db);
  for (const row of r.rows) out.set(row.run_id, { atMs: Number(row.at_ms), outcome: row.outcome, count: Number(row.n) });
  return out;
}
