import { sql, type Selectable } from 'kysely';
import type { ExecutionJob } from '@gatehouse/contracts';
import {
  inTransaction,
  LIVE_STATES,
  recordAudit,
  transitionWorkflow,
  type ActionsTable,
  type Db,
  type WorkflowsTable,
} from '@gatehouse/ledger';
import { findTool, type ToolDefinition } from '@gatehouse/tools';
import { adapters, type AdapterCall, type AdapterResult } from '../../adapters/index.ts';
import { auditHealthColumns, type AuditHealthReading } from '../../domain/audit-health.ts';
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
  /** The audit-health readings, taken with the action. */
  auditHealth: AuditHealthReading;
}

/**
 * Reads what the steps need before the claim, in two statements: the workflow row, and the
 * action with its tool's switch and the audit-health readings (docs/decisions/0270-one-operation-protocol.md).
 * @throws Error when the workflow or action is missing, or the tool has no adapter.
 */
export async function loadExecutionContext(db: Db, job: ExecutionJob): Promise<ExecutionContext> {
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).executeTakeFirstOrThrow();
  const row = await db
    .selectFrom('actions as a')
    .leftJoin('tool_switches as s', 's.tool', 'a.tool')
    .selectAll('a')
    .select(['s.enabled as switch_enabled', 's.changed_at as switch_changed_at', ...auditHealthColumns])
    .where('a.id', '=', job.actionId)
    .executeTakeFirstOrThrow();
  const { switch_enabled, switch_changed_at, beatAgeMs, backlogAgeMs, ...preview } = row;
  const tool = findTool(preview.tool);
  const adapter = adapters[preview.tool];
  if (!tool || !adapter) throw new Error(`no adapter for ${preview.tool}`);
  const toolSwitch =
    switch_enabled === null || switch_changed_at === null ? null : { enabled: switch_enabled, changed_at: switch_changed_at };
  return { job, wf, preview, tool, adapter, toolSwitch, auditHealth: { beatAgeMs, backlogAgeMs } };
}

/**
 * Containment at the moment of effect (docs/product/invariants.md#containment): a switched-off
 * tool holds the step — the run pauses (once; a redelivery or another held step finds it paused)
 * with the pause's time credited back when it resumes, audited `run.paused`. Nothing is claimed
 * or consumed. Returns `held`, or null when the tool is on.
 * `hooks.switchAtAdmissionOnly` (control-removed test): the switch as it stood at admission;
 * `hooks.ignoreSwitch` (control-removed test): not checked at all.
 */
export async function holdIfSwitchedOff(
  db: Db,
  ctx: ExecutionContext,
  hooks: Pick<TestHooks, 'switchAtAdmissionOnly' | 'ignoreSwitch'>,
): Promise<ExecutionOutcome | null> {
  const { wf, preview, toolSwitch: sw } = ctx;
  if (hooks.ignoreSwitch) return null;
  const off = sw && hooks.switchAtAdmissionOnly && sw.changed_at > preview.created_at ? false : sw && !sw.enabled;
  if (!off) return null;
  await inTransaction(db, async (trx) => {
    const paused = await transitionWorkflow(trx, wf.id, {
      to: 'paused',
      nextStep: `Tool ${preview.tool} is switched off; the workflow resumes when on-call switches it on.`,
      onlyFrom: LIVE_STATES.filter((s) => s !== 'paused'),
    });
    if (!paused) return; // already paused (another held step, a redelivery) or terminal
    // The pause is on-call's, not the run's working time: credited back when it resumes.
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
      outcome: 'tool_disabled',
      revisions: { release: wf.release_id },
    });
  });
  return { kind: 'held', reason: 'tool_disabled' };
}
