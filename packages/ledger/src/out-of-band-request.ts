import { canonicalJson, sha256Hex } from '@gatehouse/contracts';
import type { Trx } from './db.ts';
import type { WorkflowsTable } from './schema.ts';

/** The run of a request a person decides outside any model conversation (see {@link insertOutOfBandRequest}). */
export interface OutOfBandRequest {
  workflowId: string;
  proposalId: string;
  /** The request's key: the run's call id, and its ticket id unless `ticketId` is given (`recon_<item>`, a change cancel's key, `override:<approval>`). */
  key: string;
  /**
   * The run's ticket id when it is not `key`: one outside the intake's ticket-id alphabet
   * (`A-Za-z0-9._:-`), so no requester's ticket of the tenant can already hold it and refuse the
   * request's insert — a change cancel's key is predictable from the scheduled run
   * (docs/decisions/0757-an-out-of-band-ticket-id-is-no-intake-ticket-id.md).
   */
  ticketId?: string;
  tenant: string;
  /** The operator who asked: the run's user. */
  operator: string;
  pack: WorkflowsTable['pack'];
  tool: string;
  /** The request's arguments; the run's text and the proposal's arguments hash are their canonical JSON's sha256. */
  args: Record<string, unknown>;
  /** Who must approve, and by when: the run's next step while it waits. */
  nextStep: string;
  release: string;
  policyRevision: string;
  /** The pack's tool catalog digest. */
  catalogDigest: string;
}

/**
 * Writes the run of an out-of-band request — a reconciliation remediation, a change cancel, a
 * release override (docs/decisions/0230 and 0280) — in the caller's transaction: a workflow
 * `awaiting_approval` (mode `act`, the operator as its user, `nextStep` saying who must approve)
 * and its round-0 proposal `valid`, keyed by `key` (its ticket id `ticketId` when given). Its action and pending approval follow with
 * {@link insertOutOfBandAction}. Seeds only: no transition, no event (the run starts where it waits).
 */
async function insertOutOfBandRequest(trx: Trx, r: OutOfBandRequest): Promise<void> {
  const argsSha256 = sha256Hex(canonicalJson(r.args));
  await trx
    .insertInto('workflows')
    .values({
      id: r.workflowId,
      tenant: r.tenant,
      ticket_id: r.ticketId ?? r.key,
      user_id: r.operator,
      pack: r.pack,
      mode: 'act',
      text_sha256: argsSha256,
      state: 'awaiting_approval',
      stop_reason: null,
      next_step: r.nextStep,
      release_id: r.release,
      policy_revision: r.policyRevision,
      catalog_digest: r.catalogDigest,
    })
    .execute();
  await trx
    .insertInto('proposals')
    .values({
      id: r.proposalId,
      workflow_id: r.workflowId,
      round: 0,
      call_id: r.key,
      tool: r.tool,
      arguments_sha256: argsSha256,
      status: 'valid',
      validation_error: null,
      offered_in_state: null,
    })
    .execute();
}

/** The action an out-of-band request asks for and its pending approval (see {@link insertOutOfBandAction}). */
export interface OutOfBandAction {
  workflowId: string;
  proposalId: string;
  actionId: string;
  approvalId: string;
  /** The action's call id and operation key: the request's key (see {@link OutOfBandRequest.key}). */
  key: string;
  tool: string;
  target: string;
  args: Record<string, unknown>;
  /** The action digest over the exact arguments, actor, tenant, policy revision and version 1. */
  digest: string;
  ruleId: string;
  policyRevision: string;
  release: string;
  /** The authoritative facts the approver is shown beside the arguments. */
  facts: Record<string, unknown>;
  tenant: string;
  /** The approver's region when the approval must come from the order's region, else null. */
  region: string | null;
  /** The amount the approver's limit must cover, integer cents; null for an action without money. */
  amountCents: number | null;
  /** The operator who asked: never its approver. */
  requester: string;
  approverRole: string;
  sameRegion: boolean;
  expiresAt: Date;
}

/**
 * Writes the action of an out-of-band request (version 1, `REQUIRE_APPROVAL`, `pending_approval`)
 * and its pending approval bound to the action's digest, in the caller's transaction, after
 * {@link insertOutOfBandRequest} wrote their run. Audit events are the caller's, as they differ by kind.
 */
async function insertOutOfBandAction(trx: Trx, a: OutOfBandAction): Promise<void> {
  await trx
    .insertInto('actions')
    .values({
      id: a.actionId,
      workflow_id: a.workflowId,
      proposal_id: a.proposalId,
      call_id: a.key,
      version: 1,
      supersedes_version: null,
      tool: a.tool,
      target: a.target,
      arguments: JSON.stringify(a.args),
      digest: a.digest,
      decision: 'REQUIRE_APPROVAL',
      rule_id: a.ruleId,
      policy_revision: a.policyRevision,
      status: 'pending_approval',
      operation_key: a.key,
      release_id: a.release,
      facts: JSON.stringify(a.facts),
    })
    .execute();
  await trx
    .insertInto('approvals')
    .values({
      id: a.approvalId,
      workflow_id: a.workflowId,
      action_id: a.actionId,
      action_version: 1,
      action_digest: a.digest,
      policy_revision: a.policyRevision,
      tool: a.tool,
      tenant: a.tenant,
      region: a.region,
      amount_cents: a.amountCents,
      requester: a.requester,
      rule_id: a.ruleId,
      status: 'pending',
      approver_role: a.approverRole,
      same_region: a.sameRegion,
      release_id: a.release,
      traceparent: null,
      expires_at: a.expiresAt,
    })
    .execute();
}

/**
 * The action fields of an out-of-band run that its request does not already give (see
 * {@link insertOutOfBandRun}); `release` and `policyRevision` default to the request's.
 */
export type OutOfBandRunAction = Omit<
  OutOfBandAction,
  'workflowId' | 'proposalId' | 'key' | 'tool' | 'args' | 'tenant' | 'requester' | 'release' | 'policyRevision'
> &
  Partial<Pick<OutOfBandAction, 'release' | 'policyRevision'>>;

/**
 * Writes a whole out-of-band run in the caller's transaction: {@link insertOutOfBandRequest}, then
 * {@link insertOutOfBandAction} with the run's ids, key, tool, arguments, tenant and operator (as
 * the requester, never its approver). Audit events are the caller's.
 */
export async function insertOutOfBandRun(trx: Trx, run: OutOfBandRequest, action: OutOfBandRunAction): Promise<void> {
  await insertOutOfBandRequest(trx, run);
  await insertOutOfBandAction(trx, {
    release: run.release,
    policyRevision: run.policyRevision,
    ...action,
    workflowId: run.workflowId,
    proposalId: run.proposalId,
    key: run.key,
    tool: run.tool,
    args: run.args,
    tenant: run.tenant,
    requester: run.operator,
  });
}
