import { sql } from 'kysely';
import { resultsQueue } from '@gatehouse/contracts';
import {
  actorHash,
  enqueueInTransaction,
  operationKeyHash,
  recordAudit,
  transitionAction,
  transitionWorkflow,
  type OperationStatus,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import { findTool, toSafeOutput, type SafeOutput } from '@gatehouse/tools';

/** Who a reconciliation write is attributed to in the audit chain. */
export interface Attribution {
  /** The operator, the lead who approved, or `reconciliation-job` (hashed in audit). */
  actor: string;
  hmacKey: string;
}

/**
 * The tool-output form of a reconciled effect: projected onto the tool's output contract and
 * passed through the untrusted-output boundary, exactly like an executor result, so a
 * reconciled answer can reach the model. `data` comes from a system of record.
 */
export function reconciledOutput(tool: string, outcome: 'succeeded' | 'failed', data: Record<string, unknown>): SafeOutput {
  const def = findTool(tool);
  if (outcome === 'failed')
    return toSafeOutput(tool, { executed: false, status: 'failed', reason: 'reconciled_not_executed' }, 'gatehouse');
  const projected = def?.output.safeParse(data);
  return toSafeOutput(
    tool,
    { executed: true, status: 'succeeded', ...(projected?.success ? projected.data : {}) },
    'untrusted-tool-output',
    def?.sensitive ?? [],
  );
}

/**
 * Records the outcome of an in-flight operation (`failed_unknown`, or `running` past its lease)
 * from the system of record's evidence, under the fencing rules: one conditional UPDATE on the
 * status and fencing token that were read, raising the token so a stale lease holder's later
 * write is refused (docs/product/design.md#leases-with-fencing). Then returns the result to the workflow:
 * an unanswered call gets its `results` job (the workflow continues), and a workflow parked in
 * `needs_reconciliation` completes once none of its operations is unknown (audited `run.completed`,
 * outcome `reconciled`). Lock order:
 * workflows → actions → operations. A frozen operation is left alone unless `frozenToo` (a
 * lead's remediation). Returns the outbox rows to publish, or null when the operation moved on
 * meanwhile.
 */
export async function settleOperation(
  trx: Trx,
  op: { key: string; status: OperationStatus; fencingToken: string; workflowId: string; actionId: string; callId: string; tool: string },
  outcome: { status: 'succeeded' | 'failed'; evidenceRef: string | null; output: SafeOutput; note: string },
  by: Attribution,
  opts: { frozenToo?: boolean } = {},
): Promise<OutboxRow[] | null> {
  const wf = await trx
    .selectFrom('workflows')
    .select(['id', 'release_id', 'state'])
    .where('id', '=', op.workflowId)
    .forUpdate()
    .executeTakeFirstOrThrow();
  await trx.selectFrom('actions').select('id').where('id', '=', op.actionId).forUpdate().execute();
  let update = trx
    .updateTable('operations')
    .set({
      status: outcome.status,
      fencing_token: sql`fencing_token + 1`,
      result: JSON.stringify(outcome.output),
      evidence_ref: outcome.evidenceRef,
      error: outcome.status === 'failed' ? outcome.note : null,
      lease_owner: null,
      lease_expires_at: null,
      updated_at: new Date(),
    })
    .where('key', '=', op.key)
    .where('status', '=', op.status)
    .where('fencing_token', '=', op.fencingToken);
  // A frozen operation is settled only by a lead's remediation, never by the automatic repair.
  if (!opts.frozenToo) update = update.where('frozen_at', 'is', null);
  const updated = await update.returning('key').executeTakeFirst();
  if (!updated) return null;
  await transitionAction(trx, op.actionId, { to: outcome.status });
  await recordAudit(trx, {
    type: 'operation.reconciled',
    service: 'reconciliation',
    runId: op.workflowId,
    actorHash: actorHash(by.hmacKey, by.actor),
    tool: op.tool,
    operationKeyHash: operationKeyHash(op.key),
    callId: op.callId,
    outcome: outcome.status,
    // The system of record's id of the effect it settled on (docs/decisions/0146-execution-audit-fields.md).
    effectRef: outcome.status === 'succeeded' ? outcome.evidenceRef : null,
    revisions: { release: wf.release_id },
  });
  const answered = await trx
    .selectFrom('conversation_items')
    .select('id')
    .where('workflow_id', '=', op.workflowId)
    .where('kind', '=', 'function_call_output')
    .where('call_id', '=', op.callId)
    .executeTakeFirst();
  if (!answered) {
    return [
      await enqueueInTransaction(trx, resultsQueue, {
        release: wf.release_id,
        workflowId: op.workflowId,
        callId: op.callId,
        output: outcome.output,
      }),
    ];
  }
  await completeParkedRun(trx, op, outcome, by, wf.release_id);
  return [];
}

/**
 * Completes the run of `op` when it is parked in `needs_reconciliation` and none of its operations
 * is unknown any more (`failed_unknown` or `running`), audited `run.completed` with outcome
 * `reconciled` — the run ends here, not in a model turn. Otherwise nothing changes.
 */
async function completeParkedRun(
  trx: Trx,
  op: { workflowId: string; tool: string },
  outcome: { status: 'succeeded' | 'failed'; note: string },
  by: Attribution,
  release: string,
): Promise<void> {
  const unknown = await trx
    .selectFrom('operations')
    .select('key')
    .where('workflow_id', '=', op.workflowId)
    .where('status', 'in', ['failed_unknown', 'running'])
    .execute();
  if (unknown.length) return;
  await transitionWorkflow(trx, op.workflowId, {
    to: 'completed',
    nextStep: `Reconciled: ${op.tool} ${outcome.status} (${outcome.note}).`,
    onlyFrom: ['needs_reconciliation'],
    audit: {
      type: 'run.completed',
      service: 'reconciliation',
      actorHash: actorHash(by.hmacKey, by.actor),
      outcome: 'reconciled',
      revisions: { release },
    },
  });
}
