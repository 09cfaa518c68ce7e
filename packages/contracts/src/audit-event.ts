import { z } from 'zod';

/** Lifecycle event types written to the audit chain (docs/product/invariants.md#evidence). */
export const AuditEventType = z.enum([
  'run.started',
  'run.stopped',
  'run.completed',
  'run.paused',
  'run.resumed',
  /** The watchdog re-enqueued a job a live run waits for (outcome `<queue>:<missing|failed|stale>`). */
  'run.redriven',
  'model.response',
  'proposal.received',
  'proposal.invalid',
  'policy.decision',
  'approval.requested',
  'approval.decided',
  'approval.consumed',
  'approval.voided',
  /** A decision attempt refused (outcome = the reason: `digest_mismatch`, `not_a_lead`, `stale_version`, `expired`…); nothing changed. */
  'approval.refused',
  'operation.claimed',
  'operation.succeeded',
  'operation.failed',
  'operation.unknown',
  'operation.replayed',
  'operation.reconciled',
  'result.returned',
  'switch.changed',
  /**
   * `gatehouse reenable advance`: a switched-off tool's staged re-enable entered a stage (outcome
   * `<stage>;n:<n>;failures:<f>;bound:<b>;max:<m>[;override:<id>][;cohort:<tenants/users>];reason:<why>`; ADR 0310).
   */
  'reenable.advanced',
  'epoch.bumped',
  /**
   * `gatehouse tokens revoke`: a user's bearer tokens were revoked (outcome
   * `subject:<hmac>;not_before:<s>|jti:<hmac>;changed:<bool>;reason:<why>`; ADR 0695).
   */
  'user_tokens.revoked',
  /** A service refused to boot: its code differs from its release manifest (outcome names the digests). */
  'service.boot_refused',
  'ops.command',
  'ops.refused',
  'queues.drained',
  'queues.resumed',
  'queues.quarantined',
  'queues.requeued',
  'release.activated',
  'release.writes_enabled',
  'release.cohort_changed',
  'release.rolled_back',
  /**
   * `gatehouse release retire <candidate>`: one open candidate ended alone, its cohort back on the active
   * release (outcome `cohort:<cohort>;expired_approvals:<n>;operations:<json>;reason:<why>`; ADR 0728).
   */
  'release.retired',
  /** `gatehouse release analyze`: outcome `<verdict>:<failing measures>;baseline:<id>`. */
  'release.analyzed',
  'release.override_requested',
  'release.override_approved',
  'release.override_used',
  'reconciliation.classified',
  'reconciliation.resolved',
  'compensation.requested',
  /**
   * `gatehouse audit rotate-key`: anchors are signed by a new key from here on (outcome
   * `from:<spki>;to:<spki>;old_sig:<b64>;new_sig:<b64>;reason:<why>`, both keys signing the handover; ADR 0717).
   */
  'audit.key_rotated',
  /**
   * The audit monitor found the chain shorter than its witness and holds consequential steps
   * (outcome `witnessed:<seq>;head:<seq>`; ADR 0795).
   */
  'audit.loss_held',
  /**
   * `gatehouse audit acknowledge-loss`: an operator accepted the lost audit tail and released the
   * held steps (outcome `witnessed:<seq>;released:<n>;reason:<why>`; ADR 0795).
   */
  'audit.loss_acknowledged',
]);

/** A lone UTF-16 surrogate: a high one not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Whether Postgres `jsonb` (the audit outbox and chain) can store `text`: it refuses `\u0000`
 * and a lone UTF-16 surrogate (which `JSON.stringify` writes as `\udxxx`) — docs/decisions/0684-audit-chain-reserved-keys-and-jsonb.md.
 */
export function isJsonbStorableText(text: string): boolean {
  return !text.includes('\u0000') && !LONE_SURROGATE.test(text);
}

/**
 * An audit event's text field: refused by the schema (a ZodError naming the field, before any
 * statement is sent) when `jsonb` could not store it, instead of failing the caller's transaction
 * with a database error (ADR 0684).
 */
const auditText = z.string().refine(isJsonbStorableText, {
  error: 'text jsonb cannot store: a NUL character (U+0000) or a lone UTF-16 surrogate',
});

/**
 * What an audit event may contain — and nothing else (`strict`): no raw prompt, ticket text,
 * token, secret or full tool result has a field here. Actor ids are keyed HMACs; operation keys
 * are hashed.
 */
export const AuditEventSchema = z.strictObject({
  type: AuditEventType,
  /** Epoch milliseconds at the producing service. */
  atMs: z.number().int(),
  service: auditText,
  runId: auditText.nullable(),
  step: z.number().int().nullable().default(null),
  actorHash: auditText.nullable().default(null),
  tool: auditText.nullable().default(null),
  actionDigest: auditText.nullable().default(null),
  actionVersion: z.number().int().nullable().default(null),
  approvalId: auditText.nullable().default(null),
  /**
   * Why an execution event names no approval (docs/decisions/0146-execution-audit-fields.md):
   * `policy_allowed` — the action's decision was ALLOW (its rule in `ruleId`); null when
   * `approvalId` is set or the event is not about an execution.
   */
  noApprovalReason: z.enum(['policy_allowed']).nullable().default(null),
  operationKeyHash: auditText.nullable().default(null),
  callId: auditText.nullable().default(null),
  /**
   * The system of record's id of the effect an execution created (refund id, shipment id, mail
   * message id, change operation id, draft plan id); null before the outcome, and for reads.
   */
  effectRef: auditText.max(200).nullable().default(null),
  ruleId: auditText.nullable().default(null),
  decision: auditText.nullable().default(null),
  outcome: auditText.nullable().default(null),
  attempts: z.number().int().nullable().default(null),
  latencyMs: z.number().nullable().default(null),
  revisions: z
    .strictObject({
      model: auditText.nullable().default(null),
      promptHash: auditText.nullable().default(null),
      toolCatalog: auditText.nullable().default(null),
      policy: auditText.nullable().default(null),
      release: auditText.nullable().default(null),
    })
    .default({ model: null, promptHash: null, toolCatalog: null, policy: null, release: null }),
});
export type AuditEvent = z.infer<typeof AuditEventSchema>;
export type AuditEventInput = z.input<typeof AuditEventSchema>;
