import { sql, type QueryCreator, type RawBuilder, type Selectable, type Updateable } from 'kysely';
import { inTransaction, isConnectionFault, type Db, type Trx } from '../db.ts';
import type { ActionsTable, ActionStatus, DB, OperationsTable } from '../schema.ts';
import { reviveJsonRow } from '../json-row.ts';
import { decisionContextQuery, toDecisionContext, type DecisionContext, type DecisionContextRow } from '../decision-context.ts';
import { auditEventWhen, withAuditEvent, type AuditEventDraft } from '../audit.ts';
import { outboxInsertWhen, type OutboxJob, type OutboxRow } from '../outbox.ts';
import {
  actionTransitionRiding,
  transitionAction,
  transitionWorkflow,
  workflowTransitionRiding,
  type WorkflowTransitionInput,
} from '../transitions.ts';

/**
 * The operation protocol (docs/product/design.md#correctness-rules, docs/decisions/0270-one-operation-protocol.md):
 * the one implementation of reserving an operation key, consuming its approval, granting the
 * fenced lease, the write-ahead dispatch mark, the fenced record of the outcome and the reset of
 * a proven non-effect. The executor and reconciliation's remediations both go through it. Row
 * locks are taken in the order workflows → actions → operations → approvals
 * (docs/decisions/0014-row-lock-order.md); the caller locks the workflow first where it needs to.
 */

type Action = Selectable<ActionsTable>;
type Operation = Selectable<OperationsTable>;

/** The action columns the reservation writes into its operation row. */
type ReservedAction = Pick<Action, 'id' | 'operation_key' | 'workflow_id' | 'digest' | 'tool' | 'release_id'>;

/**
 * Reserves the idempotency-ledger row of an action version (docs/product/design.md#uniqueness-in-the-database)
 * in one statement: inserts `operations` with the action's operation key as `pending` if absent,
 * else locks the existing row (a no-op `ON CONFLICT DO UPDATE`), and returns it locked in `trx` —
 * whoever reserved it first. The caller holds the workflow and action row locks.
 */
export async function reserveOperation(trx: Trx | Db, action: ReservedAction): Promise<Operation> {
  return trx
    .insertInto('operations')
    .values({
      key: action.operation_key,
      workflow_id: action.workflow_id,
      action_id: action.id,
      action_digest: action.digest,
      tool: action.tool,
      status: 'pending',
      release_id: action.release_id,
    })
    .onConflict((oc) => oc.column('key').doUpdateSet({ key: (eb) => eb.ref('excluded.key') }))
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Operation row as `to_jsonb` returns it: the bigint and timestamps revived to the row's types. */
function reviveOperation(o: Record<string, unknown>): Operation {
  return reviveJsonRow<Operation>(o, {
    timestamps: ['lease_expires_at', 'dispatched_at', 'frozen_at', 'created_at', 'updated_at'],
    bigints: ['fencing_token'],
  });
}

/**
 * Locks the action row and reserves its operation in ONE statement (a CTE: the action is locked
 * before the operation row, the lock order of ADR 0014). `only`, when given, reserves only when
 * the action is at that version and in one of those statuses (else `op` is null and nothing is
 * written). With `opts.lockRun` (the action's workflow id) the same statement first locks that
 * workflow and reads its {@link DecisionContext} ({@link decisionContextQuery}): the run, then the
 * action, then the operation — the executor's checks in one statement
 * (docs/decisions/0620-the-claim-in-two-statements.md). With `opts.read` (a scalar SQL expression)
 * the same statement also evaluates it, on its own snapshot, and returns it as `read` (the
 * executor's containment read after its containment lock, ADR 0683). Returns null when the action
 * (or, with `lockRun`, its workflow) does not exist, or belongs to another workflow than `lockRun`.
 */
export async function lockActionAndReserve(
  trx: Trx,
  actionId: string,
  only?: { version: number; statuses: readonly ActionStatus[] },
  opts: { lockRun?: string; read?: RawBuilder<unknown> } = {},
): Promise<{ action: Action; op: Operation | null; run?: DecisionContext; read?: unknown } | null> {
  const filter = only ? sql`a.version = ${only.version} and a.status = any(${[...only.statuses]}::text[])` : sql`true`;
  const run = opts.lockRun ? decisionContextQuery(trx, opts.lockRun, { actionId }) : null;
  // The action's scan is gated by `exists (select 1 from w)`, a one-time filter evaluated before
  // the scan, so the run's row is locked before the action's; the operation's insert reads `a`,
  // so the action's is locked before the operation's. An action of another run than `lockRun`
  // is not locked at all (null), so no claim moves a run it did not lock.
  // Kysely writes the run's query builder in parentheses.
  const read = opts.read ? sql`, ${opts.read} as read` : sql``;
  const { rows } = await sql<Action & { op: Record<string, unknown> | null; run?: DecisionContextRow; read?: unknown }>`
    with ${run ? sql`w as ${run},` : sql``}
    a as (select * from actions where id = ${actionId}${run ? sql` and exists (select 1 from w) and workflow_id = (select w.id from w)` : sql``} for update),
    op as (
      insert into operations (key, workflow_id, action_id, action_digest, tool, status, release_id)
      select a.operation_key, a.workflow_id, a.id, a.digest, a.tool, 'pending', a.release_id from a where ${filter}
      on conflict (key) do update set key = excluded.key
      returning *
    )
    select a.*, (select to_jsonb(op) from op) as op${run ? sql`, (select to_jsonb(w) from w) as run` : sql``}${read} from a`.execute(trx);
  const row = rows[0];
  if (!row) return null;
  const { op, run: context, read: value, ...action } = row;
  return {
    action: action as Action,
    op: op ? reviveOperation(op) : null,
    ...(context ? { run: toDecisionContext(context) } : {}),
    ...(opts.read ? { read: value } : {}),
  };
}

/** What an approval must name to be consumed for an action (docs/product/invariants.md#approval). */
export interface ApprovalBinding {
  action: Pick<Action, 'id' | 'tool' | 'digest' | 'version' | 'policy_revision'>;
  /** Also require the approval's policy revision to be the action's (the executor's binding). */
  policyRevision: boolean;
}

/**
 * Consumes an approval exactly once: one conditional UPDATE `approved → used` that holds only
 * while it is unexpired and names exactly the bound action (id, tool, digest, version and, when
 * asked, policy revision). `binding` null consumes any approved, unexpired approval (a
 * control-removed test only). `audit`, when given, is written by the same statement exactly when
 * the approval is consumed (the claim's `approval.consumed`, ADR 0620). Returns whether this call
 * consumed it.
 */
export async function consumeApproval(
  trx: Trx,
  approvalId: string,
  binding: ApprovalBinding | null,
  audit?: AuditEventDraft,
): Promise<boolean> {
  let q = trx
    .updateTable('approvals')
    .set({ status: 'used', used_at: new Date() })
    .where('id', '=', approvalId)
    .where('status', '=', 'approved')
    .where('expires_at', '>', new Date());
  if (binding) {
    const a = binding.action;
    q = q
      .where('action_id', '=', a.id)
      .where('tool', '=', a.tool)
      .where('action_digest', '=', a.digest)
      .where('action_version', '=', a.version);
    if (binding.policyRevision) q = q.where('policy_revision', '=', a.policy_revision);
  }
  const consumed = q.returning('id');
  if (!audit) return (await consumed.executeTakeFirst()) !== undefined;
  const row = await trx
    .with('consumed', () => consumed)
    .with('audit_event', () => auditEventWhen(audit, 'consumed'))
    .selectFrom('consumed')
    .select('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** The lease {@link grantLease} writes. */
export interface LeaseGrant {
  owner: string;
  leaseMs: number;
  /** Baseline stored with the first claim (kept from an earlier claim when one is stored). */
  baseline?: Record<string, unknown> | null;
  /** Write the dispatch mark with the claim itself (a remediation dispatches at once). */
  dispatchNow?: boolean;
  /** The workflow's move to `executing` (through the transition table; `lockedFrom` when the caller holds its row lock). */
  workflow: Omit<WorkflowTransitionInput, 'to'>;
  /** The action's status as the caller read it under its row lock in this transaction (skips a re-read). */
  actionStatus?: ActionStatus;
  /** The claim's audit event, written by the lease's UPDATE itself (`withAuditEvent`, ADR 0420). */
  audit?: AuditEventDraft;
  /**
   * A scalar expression the grant's statement evaluates after the grant, returned as `read`: the
   * claim's limit locks and sums (`ridingLimitSums` of packages/policy, ADR 0620), so that they
   * are taken by the claim's last statement and held for it and the COMMIT only.
   */
  read?: RawBuilder<unknown>;
}

/**
 * Grants the lease on `op` with one conditional UPDATE that holds only while the fencing token is
 * still the one read under the lock: the token is incremented (a former holder's writes are then
 * refused), the `running` mark, owner, expiry and attempt written; then the action moves to
 * `running` and its workflow to `executing` (packages/ledger/src/transitions.ts). With
 * `grant.actionStatus` the action's move rides on the same UPDATE
 * (docs/decisions/0530-action-moves-with-its-operation.md), and with `grant.workflow.lockedFrom`
 * the workflow's move and its event too (docs/decisions/0620-the-claim-in-two-statements.md); a
 * move that cannot ride, or whose conditional UPDATE wrote nothing, is made after it by the
 * transition writer, as before. `grant.read` is evaluated by the same statement after the grant
 * and returned as `read` (the claim's limit locks and sums). The caller commits this before any
 * effect (write-ahead). `grant.audit` rides on the UPDATE: it is written exactly when the lease
 * is (an UPDATE that matches no row throws, and the transaction rolls back).
 * @throws when the token moved (the caller holds the row lock, so it cannot).
 */
export async function grantLease(
  trx: Trx,
  op: Operation,
  grant: LeaseGrant,
): Promise<{ fencingToken: number; baseline: unknown; read: unknown }> {
  let q = (grant.audit ? withAuditEvent(trx, grant.audit) : trx).with('granted', (db) =>
    db
      .updateTable('operations')
      .set({
        status: 'running',
        fencing_token: sql`fencing_token + 1`,
        lease_owner: grant.owner,
        lease_expires_at: new Date(Date.now() + grant.leaseMs),
        attempts: sql`attempts + 1`,
        ...(grant.baseline !== undefined ? { baseline: JSON.stringify(op.baseline ?? grant.baseline) } : {}),
        ...(grant.dispatchNow ? { dispatched_at: new Date() } : {}),
        updated_at: new Date(),
      })
      .where('key', '=', op.key)
      .where('fencing_token', '=', op.fencing_token)
      .returningAll(),
  ) as unknown as QueryCreator<DB & { granted: Operation }>;
  // The action's move to `running` rides on the same statement when its status is known (ADR 0530).
  const from = grant.actionStatus;
  const rides = from !== undefined && actionTransitionRiding(trx, op.action_id, from, 'running', 'granted') !== null;
  if (rides)
    q = q.with('action_moved', (db) =>
      actionTransitionRiding(db as unknown as QueryCreator<DB>, op.action_id, from, 'running', 'granted')!,
    ) as unknown as typeof q;
  // So does the run's move to `executing`, with its event, when its locked state is known (ADR 0620).
  const workflow: WorkflowTransitionInput = { to: 'executing', ...grant.workflow };
  const withWorkflow = workflowTransitionRiding(trx, q as unknown as QueryCreator<DB>, op.workflow_id, workflow, {
    when: 'granted',
    ...(rides ? { moved: { cte: 'action_moved' } } : {}),
  });
  if (withWorkflow) q = withWorkflow as unknown as typeof q;
  const flag = (on: boolean, cte: string) => (on ? sql<boolean>`exists (select 1 from ${sql.table(cte)})` : sql<boolean>`false`);
  const granted = await q
    .selectFrom('granted')
    .select([
      'fencing_token',
      'baseline',
      flag(rides, 'action_moved').as('action_moved'),
      flag(withWorkflow !== null, 'moved').as('workflow_moved'),
      // Read before `read`, so the run's event (the largest write here) is stored before the
      // limit locks are taken; only the deliveries and the audit row come after them.
      flag(withWorkflow !== null, 'workflow_event').as('event_written'),
      // Last in the select list: evaluated once the grant returned its row (ADR 0620).
      (grant.read ?? sql`null`).as('read'),
    ])
    .executeTakeFirstOrThrow();
  if (!granted.action_moved) await transitionAction(trx, op.action_id, { to: 'running', ...(from ? { lockedFrom: from } : {}) });
  if (!granted.workflow_moved)
    await transitionWorkflow(trx, op.workflow_id, { ...workflow, lockedFrom: withWorkflow ? undefined : workflow.lockedFrom });
  return { fencingToken: Number(granted.fencing_token), baseline: granted.baseline, read: granted.read };
}

/**
 * The write-ahead dispatch mark, committed before the effect is sent: holds only for the holder
 * of `fencingToken` on a `running` operation. `tokenEpoch` is the revocation epoch the effect's
 * delegated token carries, kept for the containment monitor (docs/decisions/0280). Returns false
 * when fenced out (a newer holder).
 */
export async function markDispatched(db: Db | Trx, key: string, fencingToken: number, tokenEpoch?: number): Promise<boolean> {
  const marked = await db
    .updateTable('operations')
    .set({ dispatched_at: new Date(), updated_at: new Date(), ...(tokenEpoch === undefined ? {} : { token_epoch: tokenEpoch }) })
    .where('key', '=', key)
    .where('fencing_token', '=', String(fencingToken))
    .where('status', '=', 'running')
    .returning('key')
    .executeTakeFirst();
  return marked !== undefined;
}

/**
 * The fenced write of a `running` operation, in ONE statement that keeps the lock order: a CTE
 * locks the action row (`FOR UPDATE`) and the UPDATE of the operation joins it, so when it writes,
 * the action is locked before the operation row (docs/decisions/0014-row-lock-order.md); when the
 * token is fenced out the action may be left unlocked, and nothing is written. The UPDATE holds
 * only for the holder of `fencingToken`. The action's move to `actionTo` rides on the statement
 * when the action is `running`, as it is after a claim (docs/decisions/0530-action-moves-with-its-operation.md).
 * Returns the action's status read under its lock and whether it moved, or undefined when fenced
 * out; when it did not move, the caller transitions it from that status.
 */
async function fencedUpdate(
  trx: Trx,
  o: { actionId: string; key: string; fencingToken: number },
  set: Updateable<OperationsTable>,
  actionTo: ActionStatus,
  carry?: CarriedJob,
): Promise<{ status: ActionStatus; moved: boolean; next: OutboxRow | null } | undefined> {
  const fenced = trx
    .with('a', (db) => db.selectFrom('actions').select('status').where('id', '=', o.actionId).forUpdate())
    .with('fenced', (db) =>
      db
        .updateTable('operations')
        .from('a')
        .set({ ...set, updated_at: new Date() })
        .where('operations.key', '=', o.key)
        .where('operations.fencing_token', '=', String(o.fencingToken))
        .where('operations.status', '=', 'running')
        .returningAll('operations')
        .returning('a.status as action_status'),
    );
  type Carrier = typeof fenced;
  const moves = actionTransitionRiding(trx, o.actionId, 'running', actionTo, 'fenced') !== null;
  let q: Carrier = fenced;
  if (moves)
    q = q.with('action_moved', (db) =>
      actionTransitionRiding(db as unknown as QueryCreator<DB>, o.actionId, 'running', actionTo, 'fenced')!,
    ) as unknown as Carrier;
  // The next job and its audit event ride on the record too, written only when it is (ADR 0540).
  if (carry) q = q.with('next_job', () => outboxInsertWhen(carry.job, 'fenced')) as unknown as Carrier;
  if (carry?.audit) q = q.with('audit_event', () => auditEventWhen(carry.audit!, 'fenced')) as unknown as Carrier;
  const row = await q
    .selectFrom('fenced')
    .select([
      'action_status',
      (moves ? sql<boolean>`exists (select 1 from action_moved)` : sql<boolean>`false`).as('moved'),
      (carry ? sql<OutboxRow | null>`(select to_jsonb(j) from next_job j)` : sql<null>`null`).as('next'),
    ])
    .executeTakeFirst();
  return row ? { status: row.action_status, moved: row.moved, next: row.next } : undefined;
}

/** The next job a fenced record writes with its outcome (an {@link outboxJob}), and that job's audit event. */
export interface CarriedJob {
  job: OutboxJob;
  audit?: AuditEventDraft;
}

/** The fenced outcome {@link recordOutcome} writes. */
export interface FencedOutcome {
  actionId: string;
  key: string;
  fencingToken: number;
  status: 'succeeded' | 'failed' | 'failed_unknown';
  /** The action's status (e.g. `denied` for a downstream refusal; default `status`). */
  actionStatus?: ActionStatus;
  /** The stored output (JSON), replayed to a redelivery. */
  result: unknown;
  evidenceRef: string | null;
  error: string | null;
}

/**
 * Records the outcome under the fencing token, in `trx` (lock order: the action, then the
 * operation): one conditional UPDATE that holds only for the lease holder of a `running`
 * operation, releasing the lease; then the action's transition. Returns false when fenced out —
 * a newer lease holder owns the outcome and nothing is written.
 */
export async function recordOutcome(trx: Trx, o: FencedOutcome): Promise<boolean> {
  return (await recordFenced(trx, o)) !== undefined;
}

/**
 * {@link recordOutcome} with the next job: the fenced UPDATE also writes `next.job` to the outbox
 * and `next.audit` to the audit outbox, both only when the outcome is recorded — one statement
 * for the outcome, the action's move, the job and its event (ADR 0540). Returns the job's outbox
 * row to publish after the commit, or null when fenced out (nothing written).
 */
export async function recordOutcomeWithJob(trx: Trx, o: FencedOutcome, next: CarriedJob): Promise<OutboxRow | null> {
  return (await recordFenced(trx, o, next))?.next ?? null;
}

/** The fenced record of {@link recordOutcome}, carrying `next` when given; undefined when fenced out. */
async function recordFenced(trx: Trx, o: FencedOutcome, next?: CarriedJob): Promise<{ next: OutboxRow | null } | undefined> {
  const to = o.actionStatus ?? o.status;
  const recorded = await fencedUpdate(
    trx,
    o,
    {
      status: o.status,
      result: o.result === null ? null : JSON.stringify(o.result),
      evidence_ref: o.evidenceRef,
      error: o.error,
      lease_owner: null,
      lease_expires_at: null,
    },
    to,
    next,
  );
  if (!recorded) return undefined;
  if (!recorded.moved) await transitionAction(trx, o.actionId, { to, lockedFrom: recorded.status });
  return { next: recorded.next };
}

/**
 * Resets an operation whose effect is proven not to have happened back to `pending` under the
 * fencing token (lease and dispatch mark cleared, `reason` kept as its error) and its action to
 * `approved`, so it may be claimed again. Returns false when fenced out.
 */
export async function resetToPending(
  trx: Trx,
  o: { actionId: string; key: string; fencingToken: number; reason: string },
): Promise<boolean> {
  const reset = await fencedUpdate(
    trx,
    o,
    { status: 'pending', lease_owner: null, lease_expires_at: null, dispatched_at: null, error: o.reason },
    'approved',
  );
  if (!reset) return false;
  if (!reset.moved) await transitionAction(trx, o.actionId, { to: 'approved', lockedFrom: reset.status });
  return true;
}

/**
 * Runs one fenced write of this protocol ({@link recordOutcomeWithJob}, {@link resetToPending}) in
 * its own transaction, and runs it again after a connection fault ({@link isConnectionFault}: a
 * terminated backend, a failover, a lost socket) until `untilMs` (epoch ms; the caller's lease
 * end), with backoff from 50 ms doubling to 1 s. The effect's result is known only to this
 * process: losing it to a connection fault would leave the step to a later reclaim, which for an
 * effect without read-back can only end `failed_unknown`. Repeating is safe because a fenced
 * write applies only while the operation is `running` under the writer's fencing token and
 * applying it ends `running`: a repeat after a COMMIT that landed but whose answer was lost finds
 * nothing to write and returns the fenced-out answer (null or false), and the landed write's
 * outbox rows are published by the outbox sweep (docs/decisions/0696-the-fenced-record-outlives-a-lost-connection.md).
 * `once` (the control-removed test only) makes one attempt.
 * @throws the last error when it is not a connection fault, or when `untilMs` has passed.
 */
export async function retryFencedWrite<T>(db: Db, write: (trx: Trx) => Promise<T>, untilMs: number, once = false): Promise<T> {
  for (let waitMs = 50; ; waitMs = Math.min(1000, waitMs * 2)) {
    try {
      return await inTransaction(db, write);
    } catch (err) {
      if (once || !isConnectionFault(err) || Date.now() + waitMs >= untilMs) throw err;
      await new Promise((r) => setTimeout(r, waitMs));
    }
  }
}

/**
 * Fences out whoever holds `key` without taking it over: raises its fencing token, unless a live
 * lease holds it (a replay of another operation's effect under its own key: a stale holder's
 * request is then refused downstream). Returns the new token, or null while a lease is live.
 */
export async function raiseFence(trx: Trx, key: string): Promise<number | null> {
  const raised = await trx
    .updateTable('operations')
    .set({ fencing_token: sql`fencing_token + 1`, updated_at: new Date() })
    .where('key', '=', key)
    .where((eb) => eb.or([eb('status', '!=', 'running'), eb('lease_expires_at', '<=', new Date())]))
    .returning('fencing_token')
    .executeTakeFirst();
  return raised ? Number(raised.fencing_token) : null;
}

/** Whether `op` is held by a live lease (another worker is executing it). */
export function leaseIsLive(op: Pick<Operation, 'status' | 'lease_expires_at'>, now = Date.now()): boolean {
  return op.status === 'running' && op.lease_expires_at !== null && new Date(op.lease_expires_at).getTime() > now;
}

/** Operation statuses that end it (docs/product/states.md): a claim replays them, never runs them again. */
export const FINISHED_OPERATION_STATUSES = ['succeeded', 'failed', 'failed_unknown'] as const;

/** Whether an operation with `status` has finished ({@link FINISHED_OPERATION_STATUSES}). */
export function isFinishedOperation(status: string): boolean {
  return (FINISHED_OPERATION_STATUSES as readonly string[]).includes(status);
}
