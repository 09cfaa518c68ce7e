import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { ExecutionJob } from '@gatehouse/contracts';
import { inTransaction, type Db, type Trx } from '@gatehouse/ledger';

/** What {@link createAction} inserted: ids, key and the execution job payload for it. */
export interface SeededAction {
  workflowId: string;
  actionId: string;
  version: number;
  callId: string;
  digest: string;
  operationKey: string;
  approvalId: string | null;
  /** Payload of the `executions` job (queue contract `executions`). */
  job: ExecutionJob;
  /** Deterministic BullMQ job id of that payload (`exec_<actionId>_v<version>`). */
  jobId: string;
}

/** Options of {@link createAction}. */
export interface ActionSeed {
  /** The tool (`reverse_refund`: a reconciliation remediation, with `ruleId: 'RECON'`; `lookup_order`: a read, seed it `decision: 'ALLOW'`). */
  tool?: 'issue_refund' | 'reship_order' | 'reverse_refund' | 'replay_refund' | 'notify_customer' | 'lookup_order';
  /** notify_customer only: the mail template (default `refund_issued`). */
  template?: 'refund_issued' | 'reship_created' | 'apology';
  orderId: string;
  /** issue_refund only; integer cents (default 3000). */
  amountCents?: number;
  reason?: string;
  /**
   * Default: what policy support-p1 decides on a fresh order paid 50000 — a refund above the
   * auto limit (5000) or any reship needs approval (R7, R9), a smaller refund is allowed.
   */
  decision?: 'ALLOW' | 'REQUIRE_APPROVAL';
  /** Default: R7 / R9 for REQUIRE_APPROVAL, `ALL` for ALLOW. */
  ruleId?: string;
  /** An approved approval row is written when true (default: decision is REQUIRE_APPROVAL). */
  approved?: boolean;
  /** A user of world.json (default rep-ana of quillfeather). */
  userId?: string;
  tenant?: string;
  release?: string;
  policyRevision?: string;
  /** The run's wall-time budget from now, ms (default 90 s, docs/product/users-and-tools.md#budgets). */
  budgetMs?: number;
  /** State the workflow row is inserted in (default `executing`); seeds only, never a transition. */
  workflowState?: 'executing' | 'completed' | 'stopped' | 'needs_reconciliation';
  /**
   * Seeds the call as the approval service leaves it when it opens an approval: the workflow
   * `awaiting_approval`, the action `pending_approval`, and its approval `pending`, undecided,
   * expiring `expiresInMs` from now (default 15 minutes; negative for one already past its expiry).
   * Overrides `approved` and `workflowState`.
   */
  pendingApproval?: { expiresInMs?: number };
}

/**
 * The decision and rule of a seeded action: `seed.decision` / `seed.ruleId`, else what the policy
 * re-evaluation at execution finds (approval for a pending approval, a reship, or a refund above
 * 5000 cents: R7 or R9; else ALLOW by `ALL`).
 * @throws Error when `pendingApproval` is asked of an action that does not require approval.
 */
function seededDecision(seed: ActionSeed, tool: string): { decision: NonNullable<ActionSeed['decision']>; ruleId: string } {
  const decision =
    seed.decision ?? (seed.pendingApproval || tool === 'reship_order' || (seed.amountCents ?? 3000) > 5000 ? 'REQUIRE_APPROVAL' : 'ALLOW');
  if (seed.pendingApproval && decision !== 'REQUIRE_APPROVAL') throw new Error('pendingApproval seeds an action that requires approval');
  return { decision, ruleId: seed.ruleId ?? (decision === 'ALLOW' ? 'ALL' : tool === 'issue_refund' ? 'R7' : 'R9') };
}

/** The arguments of a seeded action of `tool`: a refund's amount (default 3000 cents) and reason, a notice's template, else the order. */
function seededArguments(seed: ActionSeed, tool: string): Record<string, unknown> {
  if (tool === 'issue_refund')
    return { orderId: seed.orderId, amountCents: seed.amountCents ?? 3000, reason: seed.reason ?? 'damaged item' };
  if (tool === 'notify_customer') return { orderId: seed.orderId, template: seed.template ?? 'refund_issued' };
  return { orderId: seed.orderId };
}

/**
 * Writes the `function_call` of action `a` into its run's transcript (round 1): the call the run
 * waits on until its `function_call_output` is written. Nothing when it is already there.
 */
export async function writeFunctionCall(db: Db | Trx, a: Pick<SeededAction, 'workflowId' | 'callId'>): Promise<void> {
  await db
    .insertInto('conversation_items')
    .values({ workflow_id: a.workflowId, round: 1, kind: 'function_call', call_id: a.callId, item: JSON.stringify({ call_id: a.callId }) })
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/**
 * Writes a workflow (state `executing`, mode `act`), its budget, one valid proposal and one action
 * version in status `approved` (operation key `<workflowId>:action:1` — the form a former release
 * stored, which every reader takes as written (ADR 0789) — and a random 64-hex digest),
 * plus — when the action requires approval — an approval row `approved` by lead-eli that names
 * exactly that action (tool, version, digest, policy revision) and expires in 15 minutes (or, with
 * `pendingApproval`, the run waiting on that approval, still pending). One
 * transaction. Decision and rule default to what the policy re-evaluation at execution finds.
 */
export async function createAction(db: Db, seed: ActionSeed): Promise<SeededAction> {
  const tool = seed.tool ?? 'issue_refund';
  const { decision, ruleId } = seededDecision(seed, tool);
  const pending = seed.pendingApproval;
  const approved = pending !== undefined || (seed.approved ?? decision === 'REQUIRE_APPROVAL');
  const userId = seed.userId ?? 'rep-ana';
  const tenant = seed.tenant ?? 'quillfeather';
  const release = seed.release ?? 'rel-1';
  const policy = seed.policyRevision ?? 'support-p1';
  const workflowId = randomUUID();
  const actionId = randomUUID();
  const proposalId = randomUUID();
  const approvalId = approved ? randomUUID() : null;
  const version = 1;
  const callId = `call_${randomBytes(8).toString('hex')}`;
  const digest = randomBytes(32).toString('hex');
  const operationKey = `${workflowId}:action:${version}`;
  const args = seededArguments(seed, tool);
  const now = new Date();
  await inTransaction(db, async (trx) => {
    await insertRun(
      trx,
      {
        workflowId,
        tenant,
        userId,
        state: pending ? 'awaiting_approval' : (seed.workflowState ?? 'executing'),
        release,
        policyRevision: policy,
        budgetMs: seed.budgetMs,
      },
      now,
    );
    await insertProposal(trx, { id: proposalId, workflowId, callId, tool, argumentsJson: JSON.stringify(args), status: 'valid' });
    await trx
      .insertInto('actions')
      .values({
        id: actionId,
        workflow_id: workflowId,
        proposal_id: proposalId,
        call_id: callId,
        version,
        tool,
        target: seed.orderId,
        arguments: JSON.stringify(args),
        digest,
        decision,
        rule_id: ruleId,
        policy_revision: policy,
        status: pending ? 'pending_approval' : 'approved',
        operation_key: operationKey,
        release_id: release,
        facts: JSON.stringify({}),
      })
      .execute();
    if (approvalId)
      await insertSeededApproval(trx, {
        id: approvalId,
        workflowId,
        actionId,
        version,
        digest,
        policy,
        tool,
        tenant,
        amountCents: tool === 'issue_refund' ? (seed.amountCents ?? 3000) : null,
        userId,
        ruleId,
        release,
        pending,
        now,
      });
  });
  const job: ExecutionJob = { release, workflowId, actionId, actionVersion: version, approvalId };
  return { workflowId, actionId, version, callId, digest, operationKey, approvalId, job, jobId: `exec_${actionId}_v${version}` };
}

/**
 * The approval row of a seeded action: `approved` by lead-eli at `now` and expiring 15 minutes
 * later, or — with `pending` — still pending and expiring `pending.expiresInMs` (default 15 min)
 * after `now`. It names exactly the action (id, version, digest, tool, policy revision); region US.
 */
async function insertSeededApproval(
  trx: Trx,
  a: {
    id: string;
    workflowId: string;
    actionId: string;
    version: number;
    digest: string;
    policy: string;
    tool: string;
    tenant: string;
    /** Integer cents; null for a tool without an amount. */
    amountCents: number | null;
    userId: string;
    ruleId: string;
    release: string;
    pending: ActionSeed['pendingApproval'];
    now: Date;
  },
): Promise<void> {
  const { pending, now } = a;
  await trx
    .insertInto('approvals')
    .values({
      id: a.id,
      workflow_id: a.workflowId,
      action_id: a.actionId,
      action_version: a.version,
      action_digest: a.digest,
      policy_revision: a.policy,
      tool: a.tool,
      tenant: a.tenant,
      region: 'US',
      amount_cents: a.amountCents,
      requester: a.userId,
      rule_id: a.ruleId,
      status: pending ? 'pending' : 'approved',
      approver: pending ? null : 'lead-eli',
      release_id: a.release,
      expires_at: new Date(now.getTime() + (pending?.expiresInMs ?? 15 * 60_000)),
      decided_at: pending ? null : now,
    })
    .execute();
}

/** The run a seeded call belongs to (see {@link insertRun}). */
interface RunSeed {
  workflowId: string;
  tenant: string;
  userId: string;
  state: 'investigating' | 'executing' | 'awaiting_approval' | 'completed' | 'stopped' | 'needs_reconciliation';
  release: string;
  policyRevision: string;
  /** The run's wall-time budget from `now`, ms (default 90 s). */
  budgetMs?: number;
  /** The workflow's model round (default: the column's default). */
  round?: number;
}

/** The round-1 proposal row of a seeded call: its arguments' SHA-256 over `argumentsJson`, as the gateway records it. */
async function insertProposal(
  trx: Trx,
  p: { id: string; workflowId: string; callId: string; tool: string; argumentsJson: string; status: 'valid' | 'received' },
): Promise<void> {
  await trx
    .insertInto('proposals')
    .values({
      id: p.id,
      workflow_id: p.workflowId,
      round: 1,
      call_id: p.callId,
      tool: p.tool,
      arguments_sha256: createHash('sha256').update(p.argumentsJson).digest('hex'),
      status: p.status,
    })
    .execute();
}

/** Writes a support run (mode `act`) in state `r.state` and its budget (8 rounds, 6 calls, `budgetMs`), in `trx`; seeds only, never a transition. */
async function insertRun(trx: Trx, r: RunSeed, now: Date): Promise<void> {
  await trx
    .insertInto('workflows')
    .values({
      id: r.workflowId,
      tenant: r.tenant,
      ticket_id: `T-${randomBytes(6).toString('hex')}`,
      user_id: r.userId,
      pack: 'support',
      mode: 'act',
      text_sha256: createHash('sha256').update(r.workflowId).digest('hex'),
      state: r.state,
      release_id: r.release,
      policy_revision: r.policyRevision,
      catalog_digest: 'f'.repeat(64),
      ...(r.round === undefined ? {} : { round: r.round }),
    })
    .execute();
  await trx
    .insertInto('budgets')
    .values({
      workflow_id: r.workflowId,
      max_rounds: 8,
      max_tool_calls: 6,
      deadline_at: new Date(now.getTime() + (r.budgetMs ?? 90_000)),
      max_spend_micro_usd: 100_000,
    })
    .execute();
}

/** Options of {@link createProposal}. */
export interface ProposalSeed {
  tool: string;
  /** The model's arguments, as it sent them (serialized into the `function_call`). */
  arguments: Record<string, unknown>;
  /** A user of world.json (default rep-ana of quillfeather). */
  userId?: string;
  tenant?: string;
  release?: string;
  policyRevision?: string;
}

/** What {@link createProposal} inserted. */
export interface SeededProposal {
  workflowId: string;
  proposalId: string;
  callId: string;
}

/**
 * Writes a run waiting for the policy gateway, as the agent loop leaves it before it enqueues the
 * `proposals` job: a workflow `investigating` in round 1 (mode `act`), its budget, the model's
 * `function_call` item and the proposal `received`, with the sha256 of the raw arguments. One
 * transaction.
 */
export async function createProposal(db: Db, seed: ProposalSeed): Promise<SeededProposal> {
  const workflowId = randomUUID();
  const proposalId = randomUUID();
  const callId = `call_${randomBytes(8).toString('hex')}`;
  const args = JSON.stringify(seed.arguments);
  await inTransaction(db, async (trx) => {
    await insertRun(
      trx,
      {
        workflowId,
        tenant: seed.tenant ?? 'quillfeather',
        userId: seed.userId ?? 'rep-ana',
        state: 'investigating',
        release: seed.release ?? 'rel-1',
        policyRevision: seed.policyRevision ?? 'support-p1',
        round: 1,
      },
      new Date(),
    );
    const item = { type: 'function_call', call_id: callId, name: seed.tool, arguments: args };
    await trx
      .insertInto('conversation_items')
      .values({ workflow_id: workflowId, round: 1, kind: 'function_call', call_id: callId, item: JSON.stringify(item) })
      .execute();
    await insertProposal(trx, { id: proposalId, workflowId, callId, tool: seed.tool, argumentsJson: args, status: 'received' });
  });
  return { workflowId, proposalId, callId };
}

/**
 * Records the effect of a seeded action as the executor would leave it, without running it: its
 * operation row `status` (fencing token 1, the action's digest, tool and release; `error` as the
 * executor records a failure's, e.g. `401:invalid_token:…`) and the action in the same status; with
 * `approvalUsed` (default true) its approval, if any, is `used`. For the standing queries (invariant
 * monitors, metrics, a run's failed actions) that judge effects by their records.
 */
export async function recordEffect(
  db: Db,
  a: SeededAction,
  opts: { status?: 'succeeded' | 'failed' | 'failed_unknown' | 'running'; error?: string; approvalUsed?: boolean } = {},
): Promise<void> {
  const status = opts.status ?? 'succeeded';
  const row = await db
    .selectFrom('actions')
    .select(['digest', 'tool', 'release_id'])
    .where('id', '=', a.actionId)
    .executeTakeFirstOrThrow();
  await db
    .insertInto('operations')
    .values({
      key: a.operationKey,
      workflow_id: a.workflowId,
      action_id: a.actionId,
      action_digest: row.digest,
      tool: row.tool,
      status,
      fencing_token: 1,
      release_id: row.release_id,
      error: opts.error ?? null,
    })
    .execute();
  await db.updateTable('actions').set({ status }).where('id', '=', a.actionId).execute();
  if (a.approvalId && (opts.approvalUsed ?? true))
    await db.updateTable('approvals').set({ status: 'used', used_at: new Date() }).where('id', '=', a.approvalId).execute();
}

/** Options of {@link seedFinishedRun}. */
export interface FinishedRunSeed {
  release: string;
  /** Terminal state (default `completed`). */
  state?: 'completed' | 'stopped' | 'needs_reconciliation';
  stopReason?: string | null;
  /** Seconds from intake to the terminal state (default 10). */
  seconds?: number;
  /** Model spend of the run, micro-USD (default 1000). */
  spendMicroUsd?: number;
  /** Denied actions in the run (default 0). */
  denied?: number;
  /** Operations of the run that ended failed_unknown (default 0). */
  failedUnknown?: number;
  /** When the run was received (default now; it reaches its terminal state `seconds` later). */
  createdAt?: Date;
  /** Completed while its release's writes were off (`writes_withheld`, ADR 0724; default false). */
  writesWithheld?: boolean;
}

/**
 * Writes a finished run of `release` for canary analysis tests: a workflow in a terminal state
 * with its budget's spend, `denied` denied actions and `failedUnknown` failed_unknown operations
 * (each through {@link createAction}, then set by hand — test data, not a transition).
 * @returns the workflow id.
 */
export async function seedFinishedRun(db: Db, seed: FinishedRunSeed): Promise<string> {
  const seconds = seed.seconds ?? 10;
  const created = seed.createdAt ?? new Date();
  // A reship, not a refund: seeded runs must not count toward any refund limit of the tests around them.
  const first = await createAction(db, {
    tool: 'reship_order',
    orderId: 'O-1001',
    release: seed.release,
    decision: 'ALLOW',
    ruleId: 'ALL',
    approved: false,
    workflowState: seed.state ?? 'completed',
  });
  const workflowId = first.workflowId;
  for (let i = 0; i < (seed.denied ?? 0); i++) {
    await sql`insert into actions (id, workflow_id, proposal_id, call_id, version, tool, target, arguments, digest, decision, rule_id,
        policy_revision, status, operation_key, release_id, facts)
      select gen_random_uuid(), workflow_id, proposal_id, call_id || ${`_d${i}`}, version + ${i + 1}, tool, target, arguments, digest,
        'DENY', 'R2', policy_revision, 'denied', operation_key || ${`:d${i}`}, release_id, facts
      from actions where id = ${first.actionId}`.execute(db);
  }
  for (let i = 0; i < (seed.failedUnknown ?? 0); i++) {
    await sql`insert into operations (key, workflow_id, action_id, action_digest, tool, status, release_id)
      values (${`${workflowId}:unknown:${i}`}, ${workflowId}, ${first.actionId}, ${first.digest}, 'reship_order', 'failed_unknown',
        ${seed.release})`.execute(db);
  }
  await sql`update workflows set stop_reason = ${seed.stopReason ?? null}, writes_withheld = ${seed.writesWithheld ?? false},
      created_at = ${created}, updated_at = ${new Date(created.getTime() + seconds * 1000)} where id = ${workflowId}`.execute(db);
  await sql`update budgets set spend_micro_usd = ${seed.spendMicroUsd ?? 1000} where workflow_id = ${workflowId}`.execute(db);
  return workflowId;
}

/**
 * Sets `deadlock_timeout` for new sessions of `database` (superuser). Deadlocks are still
 * detected and counted; a short timeout only keeps a test that provokes them fast.
 */
export async function setDeadlockTimeout(db: Db, database: string, ms: number): Promise<void> {
  await sql`ALTER DATABASE ${sql.id(database)} SET deadlock_timeout = ${sql.lit(`${Math.max(1, Math.trunc(ms))}ms`)}`.execute(db);
}

/** Deadlocks Postgres has detected in `database` so far (`pg_stat_database`, flushed stats). */
export async function deadlockCount(db: Db, database: string): Promise<number> {
  const r = await sql<{ deadlocks: string | number }>`SELECT deadlocks FROM pg_stat_database WHERE datname = ${database}`.execute(db);
  return Number(r.rows[0]?.deadlocks ?? 0);
}
