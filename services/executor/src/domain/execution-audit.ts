import type { Selectable } from 'kysely';
import type { AuditEventInput } from '@gatehouse/contracts';
import { actorHash, operationKeyHash, type ActionsTable, type Db, type Trx } from '@gatehouse/ledger';

/** The fields every execution audit event carries (docs/decisions/0146-execution-audit-fields.md). */
export type ExecutionAuditFields = Required<
  Pick<
    AuditEventInput,
    | 'service'
    | 'runId'
    | 'actorHash'
    | 'tool'
    | 'actionDigest'
    | 'actionVersion'
    | 'approvalId'
    | 'noApprovalReason'
    | 'operationKeyHash'
    | 'callId'
    | 'ruleId'
    | 'revisions'
  >
>;

/**
 * The correlation fields of an execution audit event (`operation.claimed`, `approval.consumed`,
 * `operation.succeeded|failed|unknown|replayed`), read from the ledger in the caller's
 * transaction (docs/product/invariants.md#evidence): the hashed actor, the action (tool, digest,
 * version, call id, rule), the hashed operation key, the approval — `approvalId` when one was
 * consumed for it, else `noApprovalReason: 'policy_allowed'` for an ALLOW action — and the
 * model, prompt (instructions digest), tool catalog, policy and release revisions. The model and
 * prompt are those of the model turn that proposed the call (`model_turns` of the proposal's
 * round). `approvalId`, when given, is the approval the caller has just consumed; otherwise the
 * approval used for this action is looked up.
 * @throws when the action's workflow row is missing (a broken ledger).
 */
export async function executionAuditFields(
  db: Db | Trx,
  action: Selectable<ActionsTable>,
  opts: { auditHmacKey: string; approvalId?: string | null },
): Promise<ExecutionAuditFields> {
  // One statement: the workflow, the proposing model turn and the used approval (ADR 0270).
  const wf = await db
    .selectFrom('workflows as w')
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('proposals as p')
          .innerJoin('model_turns as m', (j) => j.onRef('m.workflow_id', '=', 'p.workflow_id').onRef('m.round', '=', 'p.round'))
          .select(['m.model', 'm.instructions_sha256'])
          .where('p.id', '=', action.proposal_id)
          .limit(1)
          .as('turn'),
      (j) => j.onTrue(),
    )
    .select((eb) => [
      'w.user_id',
      'w.catalog_digest',
      'turn.model',
      'turn.instructions_sha256',
      eb
        .selectFrom('approvals')
        .select('id')
        .where('action_id', '=', action.id)
        .where('status', '=', 'used')
        .limit(1)
        .as('used_approval_id'),
    ])
    .where('w.id', '=', action.workflow_id)
    .executeTakeFirstOrThrow();
  const turn = wf.model === null && wf.instructions_sha256 === null ? undefined : wf;
  const approvalId = opts.approvalId ?? (action.decision === 'REQUIRE_APPROVAL' ? (wf.used_approval_id ?? null) : null);
  return {
    service: 'executor',
    runId: action.workflow_id,
    actorHash: actorHash(opts.auditHmacKey, wf.user_id),
    tool: action.tool,
    actionDigest: action.digest,
    actionVersion: action.version,
    approvalId,
    noApprovalReason: action.decision === 'ALLOW' ? 'policy_allowed' : null,
    operationKeyHash: operationKeyHash(action.operation_key),
    callId: action.call_id,
    ruleId: action.rule_id,
    revisions: {
      model: turn?.model ?? null,
      promptHash: turn?.instructions_sha256 ?? null,
      toolCatalog: wf.catalog_digest,
      policy: action.policy_revision,
      release: action.release_id,
    },
  };
}
