import { sql, type Expression, type RawBuilder, type Selectable } from 'kysely';
import type { ExecutionJob } from '@gatehouse/contracts';
import {
  cohortAdmits,
  credentialEpochColumn,
  inTransaction,
  LIVE_STATES,
  lockContainment,
  recordAudit,
  reviveWorkflow,
  transitionWorkflow,
  type ActionsTable,
  type Db,
  type OperationsTable,
  type ReenableStage,
  type Trx,
  type WorkflowsTable,
  auditHealthColumns,
  auditLossHoldColumn,
  type AuditHealthReading,
} from '@gatehouse/ledger';
import { findTool, type ToolDefinition } from '@gatehouse/tools';
import { adapters, type AdapterCall, type AdapterResult } from '../../adapters/index.ts';
import { auditBasisColumns, auditBasisOf, type AuditBasis } from '../../domain/execution-audit.ts';
import type { TestHooks } from '../../domain/test-hooks.ts';
import type { ExecutionOutcome } from '../../domain/execution-outcome.ts';

/** What every step of one execution reads: the run, the action as admitted, its tool and adapter. */
export interface ExecutionContext {
  job: ExecutionJob;
  wf: Selectable<WorkflowsTable>;
  /** The action as read before the claim (not locked; the claim reads it again under its lock). */
  preview: Selectable<ActionsTable>;
  tool: ToolDefinition;
  adapter: (call: AdapterCall) => Promise<AdapterResult>;
  /** The tool's switch row (null: never switched). */
  toolSwitch: { enabled: boolean; changed_at: Date } | null;
  /**
   * The tool's open staged re-enable (docs/decisions/0310-staged-reenable.md): its stage, and whether
   * an open cohort stage admits this workflow (null stage: none open).
   */
  reenable: { stage: ReenableStage | null; cohortAdmits: boolean };
  /** The audit-health readings, taken with the action. */
  auditHealth: AuditHealthReading;
  /** Why a lost audit tail holds consequential steps (`auditLossHoldColumn`, ADR 0795), read with the action; null: not held. */
  auditLossHold: string | null;
  /**
   * The action's operation as read with it (not locked; null: not reserved yet): what a
   * redelivery is answered from without a claim (docs/decisions/0350-redelivery-without-a-claim.md).
   */
  operation: OperationPreview | null;
  /** What the step's audit events carry beyond the action, read with it (one statement, ADR 0270). */
  auditBasis: AuditBasis;
  /**
   * The revocation epoch read with the action (`credentialEpochColumn`; null: its row is missing,
   * which `requireCredentialEpoch` refuses — no token without it, ADR 0170).
   */
  credentialEpoch: number | string | null;
}

/** The columns of the action's operation a redelivery is judged on. */
export type OperationPreview = Pick<
  Selectable<OperationsTable>,
  'status' | 'lease_expires_at' | 'action_digest' | 'frozen_at' | 'result' | 'evidence_ref'
>;

/**
 * Reads what the steps need before the claim, in one statement, unlocked: the action with its
 * workflow row, its tool's switch and staged re-enable, the audit-health readings and the audit-loss hold, its operation
 * the basis of its audit events and the revocation epoch (null when it cannot be read; docs/decisions/0270-one-operation-protocol.md,
 * 0420-audit-events-ride-on-their-statement.md).
 * @throws Error when the action or its workflow is missing, the read fails without the epoch too,
 *   or the tool has no adapter.
 */
export async function loadExecutionContext(db: Db, job: ExecutionJob): Promise<ExecutionContext> {
  // When the read with the epoch fails (its table gone or not readable, ADR 0420), the rest is
  // read again without it: the unreadable epoch then fails closed in `readClaimInputs`, where the
  // step is held or, past the outage ceiling, stopped, and the steps before it (the switch, the
  // audit gate, a redelivery's answer) never depend on the epoch. An error of the rest is thrown.
  const row = await readExecutionRow(db, job, true).catch(async () => ({
    credential_epoch: null,
    ...(await readExecutionRow(db, job, false)),
  }));
  const {
    wf_row,
    audit_user_id,
    audit_catalog_digest,
    audit_turn,
    audit_used_approval_id,
    switch_enabled,
    switch_changed_at,
    beatAgeMs,
    backlogAgeMs,
    audit_loss_hold,
    cohort_admits,
    reenable_stage,
    credential_epoch,
    op_status,
    op_lease_expires_at,
    op_action_digest,
    op_frozen_at,
    op_result,
    op_evidence_ref,
    ...preview
  } = row;
  const wf = reviveWorkflow(wf_row);
  const auditBasis = auditBasisOf({ audit_user_id, audit_catalog_digest, audit_turn, audit_used_approval_id });
  const tool = findTool(preview.tool);
  const adapter = adapters[preview.tool];
  if (!tool || !adapter) throw new Error(`no adapter for ${preview.tool}`);
  const { toolSwitch, reenable } = containmentOf({ switch_enabled, switch_changed_at, cohort_admits, reenable_stage });
  const operation: OperationPreview | null =
    op_status === null || op_action_digest === null
      ? null
      : {
          status: op_status,
          lease_expires_at: op_lease_expires_at,
          action_digest: op_action_digest,
          frozen_at: op_frozen_at,
          result: op_result,
          evidence_ref: op_evidence_ref,
        };
  const auditHealth = { beatAgeMs, backlogAgeMs };
  return {
    job,
    wf,
    preview,
    tool,
    adapter,
    toolSwitch,
    reenable,
    auditHealth,
    auditLossHold: audit_loss_hold ?? null,
    operation,
    auditBasis,
    credentialEpoch: credential_epoch ?? null,
  };
}

/**
 * The one statement {@link loadExecutionContext} reads (see there), the revocation epoch with it
 * when `withEpoch`. @throws Error when the action or its workflow is missing.
 */
function readExecutionRow(db: Db, job: ExecutionJob, withEpoch: boolean) {
  return db
    .selectFrom('actions as a')
    .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
    .leftJoin('tool_switches as s', 's.tool', 'a.tool')
    .leftJoin('operations as o', 'o.key', 'a.operation_key')
    .selectAll('a')
    .select(sql<unknown>`to_jsonb(w)`.as('wf_row'))
    .select(auditBasisColumns(sql.ref('a.proposal_id'), sql.ref('a.id')))
    .select([...auditHealthColumns, auditLossHoldColumn.as('audit_loss_hold'), ...containmentColumns(sql.ref('a.tool'))])
    .select([
      'o.status as op_status',
      'o.lease_expires_at as op_lease_expires_at',
      'o.action_digest as op_action_digest',
      'o.frozen_at as op_frozen_at',
      'o.result as op_result',
      'o.evidence_ref as op_evidence_ref',
    ])
    .$if(withEpoch, (qb) => qb.select(credentialEpochColumn.as('credential_epoch')))
    .where('a.id', '=', job.actionId)
    .executeTakeFirstOrThrow();
}

/**
 * Whether containment holds the step now: the tool's switch is off and no open cohort stage of its
 * staged re-enable admits the workflow (the rule of `heldByContainment` in the ledger, read with
 * the action). `hooks.switchAtAdmissionOnly`: the switch as it stood at admission;
 * `hooks.disableReenableCohort`: a cohort stage admits everyone; `hooks.ignoreSwitch`: the switch
 * is not checked at all (control-removed tests).
 */
function containmentHolds(
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch'>,
): boolean {
  const { preview, toolSwitch: sw, reenable } = ctx;
  if (hooks.ignoreSwitch || !sw || sw.enabled) return false;
  if (hooks.switchAtAdmissionOnly && sw.changed_at > preview.created_at) return false;
  return !(reenable.cohortAdmits || (hooks.disableReenableCohort && reenable.stage === 'cohort'));
}

/** The paused run's next step: why the tool holds it, and what releases it. */
function heldNextStep(ctx: ExecutionContext): string {
  const tool = ctx.preview.tool;
  if (ctx.reenable.stage === 'cohort')
    return `Tool ${tool} is re-enabled for a cohort only; the workflow resumes when on-call advances it to everyone (gatehouse reenable advance ${tool}).`;
  return `Tool ${tool} is switched off; the workflow resumes when on-call switches it on.`;
}

/**
 * Containment at the moment of effect (docs/product/invariants.md#containment): a switched-off
 * tool holds the step — unless an open cohort stage of its staged re-enable admits the workflow
 * (docs/decisions/0310-staged-reenable.md) — the run pauses (once; a redelivery or another held
 * step finds it paused) with the pause's time credited back when it resumes, audited `run.paused`.
 * Nothing is claimed or consumed. Returns `held`, or null when the tool may run.
 */
export async function holdIfSwitchedOff(
  db: Db,
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch'>,
): Promise<ExecutionOutcome | null> {
  if (!containmentHolds(ctx, hooks)) return null;
  const held = await inTransaction(db, async (trx) => {
    // Read again under the containment lock (ADR 0683): a switch-on under way commits first, and
    // its step then runs rather than pausing a run nothing holds any more.
    if (!(await containmentHoldsLocked(trx, ctx, hooks))) return false;
    await pauseHeldRun(trx, ctx, heldNextStep(ctx), 'tool_disabled');
    return true;
  });
  return held ? { kind: 'held', reason: 'tool_disabled' } : null;
}

/**
 * Pauses `ctx`'s run for a held step, in `trx` (the caller has checked the hold under its lock):
 * `paused` with `nextStep` (once; a run already paused or terminal is left as it is), the pause's
 * start marked so its time is credited back when it resumes (on-call's wait is not the run's
 * working time), audited `run.paused` with `outcome`. Nothing is claimed or consumed.
 */
export async function pauseHeldRun(
  trx: Trx,
  ctx: ExecutionContext,
  nextStep: string,
  outcome: 'tool_disabled' | 'audit_loss',
): Promise<void> {
  const { wf, preview } = ctx;
  const paused = await transitionWorkflow(trx, wf.id, {
    to: 'paused',
    nextStep,
    onlyFrom: LIVE_STATES.filter((s) => s !== 'paused'),
  });
  if (!paused) return; // already paused (another held step, a redelivery) or terminal
  await trx
    .updateTable('budgets')
    .set({ paused_at: sql`coalesce(paused_at, now())` })
    .where('workflow_id', '=', wf.id)
    .execute();
  await recordAudit(trx, {
    type: 'run.paused',
    service: 'executor',
    runId: wf.id,
    tool: preview.tool,
    actionVersion: preview.version,
    outcome,
    revisions: { release: wf.release_id },
  });
}

/**
 * Containment read again under its lock when pausing a held step
 * (docs/decisions/0683-switch-off-serializes-with-the-claim.md): takes the tool's containment lock
 * (`lockContainment`, shared — a switch change under way commits first), then reads the switch and
 * the staged re-enable as they are now. True when they hold the step. The claim reads them the same
 * way, in its checks' statement ({@link containmentAtClaim}).
 */
export async function containmentHoldsLocked(
  trx: Trx,
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch'>,
): Promise<boolean> {
  if (hooks.ignoreSwitch) return false;
  await lockContainment(trx, ctx.preview.tool, 'share');
  const now = await containmentQuery(trx, ctx).executeTakeFirst();
  return now !== undefined && containmentHolds({ ...ctx, ...containmentOf(now) }, hooks);
}

/**
 * Whether containment holds `ctx`'s step now, read in a transaction of its own under the tool's
 * containment lock ({@link containmentHoldsLocked}): asked before an idempotent write's retry
 * (docs/decisions/0700-a-retry-is-held-by-a-switch-off.md). Always false with
 * `hooks.switchNotRecheckedBeforeRetry` (its control-removed test) or `hooks.ignoreSwitch`.
 * @throws the ledger's error when the read fails (the adapter's attempt then fails with it).
 */
export async function containmentHoldsNow(
  db: Db,
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch' | 'switchNotRecheckedBeforeRetry'>,
): Promise<boolean> {
  if (hooks.switchNotRecheckedBeforeRetry) return false;
  return inTransaction(db, (trx) => containmentHoldsLocked(trx, ctx, hooks));
}

/** The claim's containment check: read by the claim's checks' statement, judged by {@link ContainmentAtClaim.holds}. */
export interface ContainmentAtClaim {
  /** A scalar SQL expression: the containment row of {@link containmentColumns} as JSON (null: no workflow). */
  read: RawBuilder<unknown>;
  /** True when the value `read` returned holds the step: nothing may be claimed. */
  holds(value: unknown): boolean;
}

/**
 * Containment at the claim (docs/decisions/0683-switch-off-serializes-with-the-claim.md): takes the
 * tool's containment lock, shared, as the first statement of the claim's transaction, before any
 * row lock of the claim (a switch change waits for this claim, this claim for a switch change under
 * way), and returns the read that the claim's checks' statement makes on its own snapshot, taken
 * after the lock — so a switch-off (or the end of a cohort stage) committed after
 * {@link loadExecutionContext} read them is seen. Null with `hooks.ignoreSwitch` (control-removed
 * tests): no lock, no read.
 */
export async function containmentAtClaim(
  trx: Trx,
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch'>,
): Promise<ContainmentAtClaim | null> {
  if (hooks.ignoreSwitch) return null;
  await lockContainment(trx, ctx.preview.tool, 'share');
  return {
    read: sql`(select to_jsonb(c) from (${containmentQuery(trx, ctx)}) c)`,
    holds: (value) => value != null && containmentHolds({ ...ctx, ...containmentOf(value as ContainmentRow) }, hooks),
  };
}

/** The containment row of `ctx`'s workflow and tool ({@link containmentColumns}). */
function containmentQuery(trx: Trx, ctx: ExecutionContext) {
  return trx
    .selectFrom('workflows as w')
    .leftJoin('tool_switches as s', (j) => j.on('s.tool', '=', ctx.preview.tool))
    .select(containmentColumns(sql.val(ctx.preview.tool)))
    .where('w.id', '=', ctx.wf.id);
}

/**
 * The columns of a tool's containment, read with its workflow `w` and its switch row `s` (left
 * joined): `switch_enabled`, `switch_changed_at`, `cohort_admits` (an open cohort stage admits the
 * workflow's tenant or user) and `reenable_stage` (the open stage, or null). One read shape for
 * {@link loadExecutionContext} and {@link containmentQuery}; {@link containmentOf} reads it back.
 */
function containmentColumns(tool: Expression<string>) {
  return [
    sql.ref<boolean | null>('s.enabled').as('switch_enabled'),
    sql.ref<Date | null>('s.changed_at').as('switch_changed_at'),
    cohortAdmits(tool, sql.ref('w.tenant'), sql.ref('w.user_id')).as('cohort_admits'),
    sql<ReenableStage | null>`(select r.stage from tool_reenable_stages r where r.tool = ${tool} and r.ended_at is null)`.as(
      'reenable_stage',
    ),
  ];
}

/** A row of {@link containmentColumns}, as the driver gives it or as `to_jsonb` writes it (the time as text). */
interface ContainmentRow {
  switch_enabled: boolean | null;
  switch_changed_at: Date | string | null;
  cohort_admits: boolean;
  reenable_stage: ReenableStage | null;
}

/** The switch (null before its first change) and the staged re-enable of {@link containmentColumns}' row. */
function containmentOf(row: ContainmentRow): Pick<ExecutionContext, 'toolSwitch' | 'reenable'> {
  const { switch_enabled: enabled, switch_changed_at: changed_at } = row;
  return {
    toolSwitch: enabled === null || changed_at === null ? null : { enabled, changed_at: new Date(changed_at) },
    reenable: { stage: row.reenable_stage, cohortAdmits: row.cohort_admits },
  };
}

/**
 * A step the claim found held ({@link containmentHoldsLocked}): the run pauses as at the containment step,
 * on the switch read again; when it was switched on again meanwhile, the job is retried (`busy`).
 */
export async function holdAfterClaimCheck(
  db: Db,
  job: ExecutionJob,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'disableReenableCohort' | 'ignoreSwitch'>,
): Promise<ExecutionOutcome> {
  return (await holdIfSwitchedOff(db, await loadExecutionContext(db, job), hooks)) ?? { kind: 'busy', actionId: job.actionId };
}
