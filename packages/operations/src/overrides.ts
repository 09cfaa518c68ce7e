import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import {
  canonicalJson,
  loadWorld,
  RELEASE_APPROVER_ROLE,
  RELEASE_OVERRIDE_RULE_ID,
  RELEASE_OVERRIDE_TOOL,
  sha256Hex,
  type ReleaseManifest,
} from '@gatehouse/contracts';
import {
  actorHash,
  inTransaction,
  insertOutOfBandRun,
  OVERRIDE_RUN_RELEASE,
  recordAudit,
  transitionWorkflow,
  type Db,
  type Trx,
} from '@gatehouse/ledger';
import { catalogDigest, toolsOfPack } from '@gatehouse/tools';

/**
 * What a two-person override lets a release command go past (docs/decisions/0210-canary-analysis.md,
 * docs/decisions/0230-two-person-release-changes.md): a failing canary analysis, a failing
 * boundary-case gate (`--force`), or a bundle that raises a limit of the active one.
 */
export type OverrideKind = 'canary' | 'force_gate' | 'raise_limits' | 'reenable' | 'audit_key';

/**
 * The audit fields naming an override's subject: the tool of a `reenable` override (a staged
 * re-enable advancing with less evidence than asked, docs/decisions/0310-staged-reenable.md),
 * none for an `audit_key` override (a lost audit key's handover, docs/decisions/0717-audit-key-rotation.md:
 * its fingerprints are in the summary), else the release.
 */
function subjectFields(kind: OverrideKind, subject: string): { tool: string } | { revisions: { release: string } } | object {
  if (kind === 'reenable') return { tool: subject };
  return kind === 'audit_key' ? {} : { revisions: { release: subject } };
}

/** The `revisions` audit field of an override's approval events: the release, when its subject is one. */
function releaseField(kind: OverrideKind, subject: string): { revisions: { release: string } } | object {
  return kind === 'reenable' || kind === 'audit_key' ? {} : { revisions: { release: subject } };
}

/** How long an override stays usable after it is asked for (ms): like an action approval, 15 minutes. */
export const OVERRIDE_TTL_MS = 15 * 60_000;

/**
 * sha256 over the kind, the release, the sha256 of its manifest and what is overridden (sorted):
 * what an override's approval is bound to (its action digest). Any change to the manifest or to
 * the items — another raised limit, another failing case or measure — is another digest.
 */
export function overrideDigest(kind: OverrideKind, release: string, items: readonly string[], manifest: ReleaseManifest | null): string {
  const manifestSha = manifest ? sha256Hex(canonicalJson(manifest)) : null;
  return sha256Hex(canonicalJson({ kind, release, manifest: manifestSha, items: [...items].sort() }));
}

/** An override to ask for or to consume: bound to `digest` over `items`; `summary` goes into the audit events. */
export interface OverrideRequest {
  release: string;
  kind: OverrideKind;
  /**
   * What it covers: failing boundary cases, raised limits, `baseline:<id>` and the failing
   * measures, or a re-enable's stages, cohort and evidence.
   */
  items: string[];
  /** The release's manifest; null for a `reenable` override, whose subject (`release`) is a tool, and an `audit_key` one. */
  manifest: ReleaseManifest | null;
  /** What the approver is shown besides the arguments when there is no manifest (default: the tool and the active release). */
  facts?: Record<string, unknown>;
  digest: string;
  summary: string;
  reason: string;
  operator: string;
  hmacKey: string;
}

/** An override asked for: the approval a policy owner or another operator decides through the approval API or inbox. */
export interface OverrideTicket {
  approvalId: string;
  workflowId: string;
  actionVersion: 1;
  actionDigest: string;
  approverRole: string;
  tenant: string;
  expiresAt: Date;
}

/**
 * Checks an override's reason: 1–500 printable characters (it is shown to the approver and stored).
 * @throws Error saying what is wrong.
 */
function checkReason(reason: string): string {
  const r = reason.trim();
  if (!r || r.length > 500 || !/^[\P{Cc}]+$/u.test(r))
    throw new Error('release override needs --reason "<why>" (1–500 printable characters)');
  return r;
}

/**
 * Records a pending override as an approval of the approval service (ADR 0230), the way a change
 * cancel asks a change owner: its own run (state `awaiting_approval`, release
 * {@link OVERRIDE_RUN_RELEASE}), one `release_override` action whose arguments are the release,
 * the kind, what it covers and the reason, and whose facts come from the manifest; a pending
 * approval (rule `RELEASE`, role `release_approver`: a policy owner or an operator, never the
 * requester) bound to `digest`, expiring after {@link OVERRIDE_TTL_MS}, single use. Audited
 * (`release.override_requested`, `approval.requested`).
 * @throws Error when the reason is malformed or the operator is not in the directory.
 */
export async function requestOverride(db: Db, r: OverrideRequest): Promise<OverrideTicket> {
  const reason = checkReason(r.reason);
  const tenant = loadWorld().users.find((u) => u.id === r.operator)?.tenant;
  if (!tenant) throw new Error(`${r.operator} is not in the directory`);
  const active = await db.selectFrom('releases').select('id').where('status', '=', 'active').executeTakeFirst();
  const t: OverrideTicket = {
    approvalId: randomUUID(),
    workflowId: randomUUID(),
    actionVersion: 1,
    actionDigest: r.digest,
    approverRole: RELEASE_APPROVER_ROLE,
    tenant,
    expiresAt: new Date(Date.now() + OVERRIDE_TTL_MS),
  };
  const args = { release: r.release, kind: r.kind, covers: [...r.items].sort(), reason };
  const facts = r.manifest
    ? {
        release: r.release,
        description: r.manifest.description ?? null,
        model: r.manifest.model.name,
        policy: `${r.manifest.policy.support}, ${r.manifest.policy.change}`,
        schemaVersion: r.manifest.schemaVersion,
        manifestSha256: sha256Hex(canonicalJson(r.manifest)),
        activeRelease: active?.id ?? null,
      }
    : (r.facts ?? { tool: r.release, activeRelease: active?.id ?? null });
  await inTransaction(db, async (trx) => {
    await insertOverrideRun(trx, t, { args, facts, r });
    const audit = { service: 'cli', runId: t.workflowId, actorHash: actorHash(r.hmacKey, r.operator), approvalId: t.approvalId };
    await recordAudit(trx, { ...audit, type: 'release.override_requested', outcome: r.summary, ...subjectFields(r.kind, r.release) });
    await recordAudit(trx, {
      ...audit,
      type: 'approval.requested',
      tool: RELEASE_OVERRIDE_TOOL,
      actionDigest: r.digest,
      actionVersion: 1,
      decision: 'REQUIRE_APPROVAL',
      ruleId: RELEASE_OVERRIDE_RULE_ID,
      ...releaseField(r.kind, r.release),
    });
  });
  return t;
}

/** The override's run, its action and its pending approval, in the caller's transaction. */
async function insertOverrideRun(
  trx: Trx,
  t: OverrideTicket,
  a: { args: Record<string, unknown>; facts: Record<string, unknown>; r: OverrideRequest },
): Promise<void> {
  const { args, r } = a;
  const run = {
    workflowId: t.workflowId,
    proposalId: randomUUID(),
    key: `override:${t.approvalId}`,
    tenant: t.tenant,
    operator: r.operator,
    pack: 'change',
    tool: RELEASE_OVERRIDE_TOOL,
    args,
    nextStep: `A policy owner or an operator other than ${r.operator} must approve the ${String(args.kind)} override of ${String(args.release)} (approval ${t.approvalId}, inbox or POST /v1/approvals/${t.approvalId}/decision) before ${t.expiresAt.toISOString()}.`,
    release: OVERRIDE_RUN_RELEASE,
    policyRevision: r.manifest?.policy.change ?? 'none',
    catalogDigest: catalogDigest(toolsOfPack('change')),
  } as const;
  await insertOutOfBandRun(trx, run, {
    actionId: randomUUID(),
    approvalId: t.approvalId,
    target: r.release,
    digest: t.actionDigest,
    ruleId: RELEASE_OVERRIDE_RULE_ID,
    policyRevision: r.manifest ? `${r.manifest.policy.support},${r.manifest.policy.change}` : 'none',
    release: r.release,
    facts: a.facts,
    region: null,
    amountCents: null,
    approverRole: RELEASE_APPROVER_ROLE,
    sameRegion: false,
    expiresAt: t.expiresAt,
  });
}

/**
 * Consumes, in `trx`, one approved and unexpired override approval of `kind` for `release` bound
 * to `digest` — one conditional UPDATE `approved → used` of the oldest such row, locked
 * (`SKIP LOCKED`) so two commands cannot both use it, never one its requester decided — then
 * completes its run and audits it (`run.completed`, `approval.consumed`, `release.override_used`).
 * @returns its approval id, or null when there is none (the caller refuses; see {@link overrideRefusal}).
 */
export async function consumeOverride(trx: Trx, r: Omit<OverrideRequest, 'reason' | 'items' | 'manifest'>): Promise<string | null> {
  const used = await trx
    .updateTable('approvals')
    .set({ status: 'used', used_at: new Date() })
    .where('id', '=', (eb) =>
      eb
        .selectFrom('approvals')
        .select('id')
        .where('rule_id', '=', RELEASE_OVERRIDE_RULE_ID)
        .where('tool', '=', RELEASE_OVERRIDE_TOOL)
        .where('release_id', '=', r.release)
        .where('action_digest', '=', r.digest)
        .where('status', '=', 'approved')
        .where('expires_at', '>', new Date())
        .whereRef('approver', '!=', 'requester')
        .orderBy('created_at')
        .limit(1)
        .forUpdate()
        .skipLocked(),
    )
    .returning(['id', 'workflow_id', 'approver'])
    .executeTakeFirst();
  if (!used) return null;
  await transitionWorkflow(trx, used.workflow_id, {
    to: 'completed',
    nextStep: `Used once by ${r.operator} for ${r.release} (${r.kind}), approved by ${used.approver ?? 'nobody'}.`,
    onlyFrom: ['awaiting_approval'],
    // Every run that completes is audited so (ADR 0755); the override's is completed by its use.
    audit: { type: 'run.completed', service: 'cli', actorHash: actorHash(r.hmacKey, r.operator), outcome: 'override_used' },
  });
  const audit = { service: 'cli', runId: used.workflow_id, actorHash: actorHash(r.hmacKey, r.operator), approvalId: used.id };
  await recordAudit(trx, {
    ...audit,
    type: 'approval.consumed',
    tool: RELEASE_OVERRIDE_TOOL,
    actionDigest: r.digest,
    actionVersion: 1,
    ...releaseField(r.kind, r.release),
  });
  await recordAudit(trx, { ...audit, type: 'release.override_used', outcome: r.summary, ...subjectFields(r.kind, r.release) });
  return used.id;
}

/**
 * Why no override of `kind` for `release` could be consumed, from its latest request: `none`
 * (never asked), `pending`, `denied`, `expired`, `used`, `void`, or `digest_mismatch` (it covers
 * something else than what is being activated now: other items, another manifest).
 */
export async function overrideRefusal(trx: Trx, release: string, kind: OverrideKind, digest: string): Promise<string> {
  const last = await trx
    .selectFrom('approvals as p')
    .innerJoin('actions as a', 'a.id', 'p.action_id')
    .select(['p.status', 'p.action_digest', 'p.expires_at'])
    .where('p.rule_id', '=', RELEASE_OVERRIDE_RULE_ID)
    .where('p.release_id', '=', release)
    .where(sql<boolean>`a.arguments->>'kind' = ${kind}`)
    .orderBy('p.created_at', 'desc')
    .executeTakeFirst();
  if (!last) return 'none';
  if (last.action_digest !== digest) return 'digest_mismatch';
  if (last.status === 'approved' || last.status === 'pending')
    return new Date(last.expires_at).getTime() <= Date.now() ? 'expired' : last.status;
  return last.status;
}
