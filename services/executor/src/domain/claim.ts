import { sql } from 'kysely';
import type { ExecutionJob } from '@gatehouse/contracts';
import {
  checkWorkingTime,
  isLegalWorkflowTransition,
  recordAudit,
  transitionAction,
  transitionWorkflow,
  type Trx,
  type ActionsTable,
  type OperationsTable,
  type OutagePolicy,
  type OutboxRow,
  type WorkflowsTable,
  reserveOperation,
} from '@gatehouse/ledger';
import type { Selectable } from 'kysely';
import { decideAndRecord, evaluateAction, type AuthoritativeRecord, type PolicyBundles } from '@gatehouse/policy';
import { findTool } from '@gatehouse/tools';
import { executionAuditFields } from './execution-audit.ts';

type Action = Selectable<ActionsTable>;
type Operation = Selectable<OperationsTable>;

/** What a claim attempt found. Only `claimed` may call the adapter. */
export type ClaimOutcome =
  | {
      kind: 'claimed';
      action: Action;
      fencingToken: number;
      reclaimed: boolean;
      previouslyDispatched: boolean;
      baseline: Record<string, unknown> | null;
    }
  | { kind: 'replay'; action: Action; operation: Operation }
  | { kind: 'busy' }
  | { kind: 'skip'; reason: string }
  | { kind: 'approval_unusable'; action: Action; reason: string }
  | { kind: 'conflict'; action: Action }
  /** Facts changed since the decision: a new action version was recorded instead of executing. */
  | { kind: 'reevaluated'; outcome: string; rows: OutboxRow[] }
  /** The run's wall-time deadline passed before dispatch (docs/product/invariants.md#bounds). */
  | { kind: 'deadline'; action: Action }
  /** The step waited on an unavailable dependency past the outage ceiling. */
  | { kind: 'outage'; action: Action };

/** Policy inputs for the re-evaluation at execution. */
export interface Reevaluation {
  wf: Selectable<WorkflowsTable>;
  bundles: PolicyBundles;
  /** The authoritative record (order, or change and plan) read just before the claim; null when not re-evaluated. */
  record: AuthoritativeRecord | null;
  auditHmacKey: string;
  /** Test-only switch (control-removed test). */
  disabled: boolean;
}

/**
 * The fenced claim (docs/product/design.md#correctness-rules: uniqueness, fencing, write-ahead, stable keys), in the caller's transaction:
 * reserve the operation key (insert-if-absent), refuse a key seen with another digest
 * (`idempotency_conflict`), consume the approval — only when tool, digest, version and policy
 * revision still match and it is unexpired — and grant the lease with one conditional UPDATE that
 * increments the fencing token and writes the `running` mark and baseline. The caller commits
 * this before calling the adapter (write-ahead).
 */
export async function claimOperation(
  trx: Trx,
  job: ExecutionJob,
  opts: {
    owner: string;
    leaseMs: number;
    baseline: Record<string, unknown> | null;
    auditHmacKey: string;
    userId: string;
    reevaluation: Reevaluation;
    /** Require the approval to name exactly this action (false only in control-removed tests). */
    bindDigest: boolean;
    /** Refuse the claim while another worker's lease is live (false only in control-removed tests). */
    honourLease?: boolean;
    /** Credits the outage this job waited through (`job.outage`) before the deadline check. */
    outagePolicy: OutagePolicy;
  },
): Promise<ClaimOutcome> {
  // Lock order everywhere: workflows → actions → operations → approvals (no deadlock cycles).
  await trx.selectFrom('workflows').select('id').where('id', '=', job.workflowId).forUpdate().executeTakeFirst();
  const action = await trx.selectFrom('actions').selectAll().where('id', '=', job.actionId).forUpdate().executeTakeFirst();
  if (!action || action.version !== job.actionVersion) return { kind: 'skip', reason: 'unknown_action_version' };
  if (!['approved', 'running', 'succeeded', 'failed', 'failed_unknown'].includes(action.status)) {
    return { kind: 'skip', reason: `action_${action.status}` };
  }
  const op = await reserveOperation(trx, action);
  if (op.action_digest !== action.digest) return { kind: 'conflict', action };
  // Reconciliation froze it (amount mismatch): only a lead's remediation may touch it now.
  if (op.frozen_at) return { kind: 'skip', reason: 'operation_frozen' };
  if (op.status === 'succeeded' || op.status === 'failed' || op.status === 'failed_unknown')
    return { kind: 'replay', action, operation: op };
  const leaseLive = op.status === 'running' && op.lease_expires_at && new Date(op.lease_expires_at).getTime() > Date.now();
  // One worker at a time, whichever replica: a live lease sends the others back to the queue (retried).
  if (leaseLive && opts.honourLease !== false) return { kind: 'busy' };

  if (op.status === 'pending') {
    // First claim: nothing was sent yet, so the run's state, deadline and facts may still stop it.
    const wf = await trx.selectFrom('workflows').select(['state']).where('id', '=', action.workflow_id).executeTakeFirstOrThrow();
    // The reservation made above stays only if this claim goes ahead (no orphan pending rows).
    const unreserve = () =>
      trx.deleteFrom('operations').where('key', '=', op.key).where('status', '=', 'pending').where('fencing_token', '=', '0').execute();
    // Only a run that may move to `executing` starts an effect (terminal states and `received` may not).
    if (!isLegalWorkflowTransition(wf.state, 'executing')) {
      await unreserve();
      return { kind: 'skip', reason: `workflow_${wf.state}` };
    }
    const time = await checkWorkingTime(trx, action.workflow_id, job.outage, opts.outagePolicy);
    if (time.kind !== 'ok') {
      await unreserve();
      return { kind: time.kind === 'budget_exhausted' ? 'deadline' : 'outage', action };
    }
    const r = opts.reevaluation;
    const tool = findTool(action.tool);
    if (!r.disabled && tool && r.record) {
      const parsed = { tool, args: action.arguments as Record<string, string | number | null>, target: action.target };
      const { decision: now } = await evaluateAction(trx, {
        wf: r.wf,
        proposalId: action.proposal_id,
        parsed,
        record: r.record,
        bundles: r.bundles,
        excludeActionId: action.id,
        atExecution: true,
      });
      if (now.decision !== action.decision || now.ruleId !== action.rule_id || now.policyRevision !== action.policy_revision) {
        await unreserve();
        const out = await decideAndRecord(trx, {
          wf: r.wf,
          proposalId: action.proposal_id,
          round: r.wf.round,
          callId: action.call_id,
          parsed,
          record: r.record,
          bundles: r.bundles,
          auditHmacKey: r.auditHmacKey,
          service: 'executor',
          reevaluates: action,
        });
        return { kind: 'reevaluated', outcome: out.outcome, rows: out.rows };
      }
    }
  }

  const audit = await executionAuditFields(trx, action, { auditHmacKey: opts.auditHmacKey, approvalId: job.approvalId });
  if (op.status === 'pending' && action.decision === 'REQUIRE_APPROVAL') {
    if (!job.approvalId) return { kind: 'approval_unusable', action, reason: 'approval_missing' };
    let consume = trx
      .updateTable('approvals')
      .set({ status: 'used', used_at: new Date() })
      .where('id', '=', job.approvalId)
      .where('status', '=', 'approved')
      .where('expires_at', '>', new Date());
    if (!opts.bindDigest) {
      // Control removed (tests only): any approved approval would do.
    } else {
      // Binding (docs/product/invariants.md#approval): the approval must name exactly this action version.
      consume = consume
        .where('action_id', '=', action.id)
        .where('tool', '=', action.tool)
        .where('action_digest', '=', action.digest)
        .where('action_version', '=', action.version)
        .where('policy_revision', '=', action.policy_revision);
    }
    const consumed = await consume.returning('id').executeTakeFirst();
    const a = consumed
      ? undefined
      : await trx.selectFrom('approvals').select(['status', 'expires_at', 'action_id']).where('id', '=', job.approvalId).executeTakeFirst();
    // One approval per action, so `used` for this action means an earlier claim of this same
    // operation consumed it (the operation went back to pending after a proven non-effect).
    const consumedBefore = a?.status === 'used' && a.action_id === action.id;
    if (!consumed && !consumedBefore) {
      const reason = !a
        ? 'approval_missing'
        : a.action_id !== action.id
          ? 'approval_names_another_action'
          : a.status === 'approved' && new Date(a.expires_at).getTime() <= Date.now()
            ? 'approval_expired'
            : `approval_${a.status}`;
      return { kind: 'approval_unusable', action, reason };
    }
    if (consumed) await recordAudit(trx, { ...audit, type: 'approval.consumed' });
  }
  const granted = await trx
    .updateTable('operations')
    .set({
      status: 'running',
      fencing_token: sql`fencing_token + 1`,
      lease_owner: opts.owner,
      lease_expires_at: new Date(Date.now() + opts.leaseMs),
      attempts: sql`attempts + 1`,
      baseline: op.baseline === null ? JSON.stringify(opts.baseline) : JSON.stringify(op.baseline),
      updated_at: new Date(),
    })
    .where('key', '=', op.key)
    .where('fencing_token', '=', op.fencing_token)
    .returning(['fencing_token', 'baseline'])
    .executeTakeFirstOrThrow();
  await transitionAction(trx, action.id, { to: 'running' });
  await transitionWorkflow(trx, action.workflow_id, {
    to: 'executing',
    nextStep: null,
    onlyFrom: ['investigating', 'awaiting_approval', 'executing'],
  });
  await recordAudit(trx, { ...audit, type: 'operation.claimed', attempts: op.attempts + 1 });
  return {
    kind: 'claimed',
    action: { ...action, status: 'running' },
    fencingToken: Number(granted.fencing_token),
    reclaimed: op.status === 'running',
    previouslyDispatched: op.dispatched_at !== null,
    baseline: (granted.baseline as Record<string, unknown> | null) ?? null,
  };
}
