import { canonicalJson, sha256Hex } from '@gatehouse/contracts';
import type { Trx } from './db.ts';
import type { WorkflowsTable } from './schema.ts';

/** The run of a request a person decides outside any model conversation (see {@link insertOutOfBandRequest}). */
export interface OutOfBandRequest {
  workflowId: string;
  proposalId: string;
  /** The request's key: the run's ticket id and its call id (`recon_<item>`, a change cancel's key, `override:<approval>`). */
  key: string;
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
 * and its round-0 proposal `valid`, keyed by `key`. Its action and approval are the caller's, as
 * they differ by kind. Seeds only: no transition, no event (the run starts where it waits).
 */
export async function insertOutOfBandRequest(trx: Trx, r: OutOfBandRequest): Promise<void> {
  const argsSha256 = sha256Hex(canonicalJson(r.args));
  await trx
    .insertInto('workflows')
    .values({
      id: r.workflowId,
      tenant: r.tenant,
      ticket_id: r.key,
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
