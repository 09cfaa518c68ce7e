import { sql, type Expression, type RawBuilder, type Selectable } from 'kysely';
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
 * What an execution audit event carries beyond the action's own columns: the run's user and
 * tool catalog, the model and prompt digest of the model turn that proposed the call
 * (`model_turns` of the proposal's round; null when none is recorded), and the approval used for
 * the action, if any. All of it is fixed once the action exists, save the used approval: a claim
 * names the one it consumes, and {@link executionAuditFields} reads again a basis that names
 * none for an action that needs one.
 */
export interface AuditBasis {
  userId: string;
  catalogDigest: string;
  model: string | null;
  promptHash: string | null;
  usedApprovalId: string | null;
}

type Operand = Expression<unknown> | RawBuilder<unknown>;

/**
 * The select list of an {@link AuditBasis}, for a query over `workflows as w` (the action's run),
 * given the action's `proposal_id` and `id`: the one definition the execution context's read
 * and {@link executionAuditFields}' own read share. Read it back with {@link auditBasisOf}.
 */
export function auditBasisColumns(proposalId: Operand, actionId: Operand) {
  return [
    sql<string>`w.user_id`.as('audit_user_id'),
    sql<string>`w.catalog_digest`.as('audit_catalog_digest'),
    // The proposing turn, one lookup for both its columns (null when no turn is recorded).
    sql<{ model: string; instructions_sha256: string | null } | null>`(select jsonb_build_object('model', m.model,
      'instructions_sha256', m.instructions_sha256) from proposals p join model_turns m on m.workflow_id = p.workflow_id
      and m.round = p.round where p.id = ${proposalId} limit 1)`.as('audit_turn'),
    sql<string | null>`(select id from approvals where action_id = ${actionId} and status = 'used' limit 1)`.as('audit_used_approval_id'),
  ] as const;
}

/** The {@link AuditBasis} of a row selected with {@link auditBasisColumns}. */
export function auditBasisOf(row: {
  audit_user_id: string;
  audit_catalog_digest: string;
  audit_turn: { model: string; instructions_sha256: string | null } | null;
  audit_used_approval_id: string | null;
}): AuditBasis {
  return {
    userId: row.audit_user_id,
    catalogDigest: row.audit_catalog_digest,
    model: row.audit_turn?.model ?? null,
    promptHash: row.audit_turn?.instructions_sha256 ?? null,
    usedApprovalId: row.audit_used_approval_id,
  };
}

/**
 * The correlation fields of an execution audit event (`operation.claimed`, `approval.consumed`,
 * `operation.succeeded|failed|unknown|replayed`) (docs/product/invariants.md#evidence): the
 * hashed actor, the action (tool, digest, version, call id, rule), the hashed operation key, the
 * approval — `approvalId` when one was consumed for it, else `noApprovalReason: 'policy_allowed'`
 * for an ALLOW action — and the model, prompt (instructions digest), tool catalog, policy and
 * release revisions. `opts.basis` is the {@link AuditBasis} read with the action (the execution
 * context's one statement); without it — or when it names no used approval for an action that
 * needs one and the caller names none (another worker may have consumed it since the read) — it
 * is read here in one statement, in the caller's transaction when `db` is one. `approvalId`,
 * when given, is the approval the caller has just consumed; otherwise the basis's used approval.
 * @throws when it reads the basis and the action's workflow row is missing (a broken ledger).
 */
export async function executionAuditFields(
  db: Db | Trx,
  action: Selectable<ActionsTable>,
  opts: { auditHmacKey: string; approvalId?: string | null; basis?: AuditBasis },
): Promise<ExecutionAuditFields> {
  // A basis read before another worker consumed the action's approval names none: read it again
  // rather than write an approval-requiring action's event without its approval.
  const stale = opts.basis && !opts.approvalId && action.decision === 'REQUIRE_APPROVAL' && opts.basis.usedApprovalId === null;
  const basis =
    (stale ? undefined : opts.basis) ??
    auditBasisOf(
      await db
        .selectFrom('workflows as w')
        .select(auditBasisColumns(sql.val(action.proposal_id), sql.val(action.id)))
        .where('w.id', '=', action.workflow_id)
        .executeTakeFirstOrThrow(),
    );
  const approvalId = opts.approvalId ?? (action.decision === 'REQUIRE_APPROVAL' ? basis.usedApprovalId : null);
  return {
    service: 'executor',
    runId: action.workflow_id,
    actorHash: actorHash(opts.auditHmacKey, basis.userId),
    tool: action.tool,
    actionDigest: action.digest,
    actionVersion: action.version,
    approvalId,
    noApprovalReason: action.decision === 'ALLOW' ? 'policy_allowed' : null,
    operationKeyHash: operationKeyHash(action.operation_key),
    callId: action.call_id,
    ruleId: action.rule_id,
    revisions: {
      model: basis.model,
      promptHash: basis.promptHash,
      toolCatalog: basis.catalogDigest,
      policy: action.policy_revision,
      release: action.release_id,
    },
  };
}
