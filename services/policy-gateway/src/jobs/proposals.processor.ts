import { resultsQueue, type ProposalJob } from '@gatehouse/contracts';
import { actorHash, enqueueInTransaction, inTransaction, recordAudit, type Db, type OutboxRow } from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import { decideAndRecord, FactsChangedAtDecision, readAuthoritative, unlockedRefundSums, type PolicyBundles } from '@gatehouse/policy';
import { recordLimitRecheck } from '@gatehouse/telemetry';
import { parseProposal, toSafeOutput } from '@gatehouse/tools';
import { jsonObjectFrom } from 'kysely/helpers/postgres';

/** Dependencies of {@link processProposal}. */
export interface ProposalDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  /** The active bundle of each pack. */
  bundles: PolicyBundles;
  stagingUrl: string;
  auditHmacKey: string;
}

/**
 * What a proposal job reads before deciding, in one statement (docs/decisions/0390-guards-in-the-update.md):
 * the workflow row, the proposal the job names (only if it is this workflow's), and the
 * `function_call` item the model sent under the job's call id. Undefined when the workflow is
 * gone or the proposal is not this workflow's (a redelivery for a decided run, or a job naming the
 * wrong run: answered `already_decided`, nothing written).
 * @throws Error when an undecided proposal exists but its call item does not (the queue retries;
 *   the agent loop writes both in one transaction, so this is a fault, not an input).
 */
async function readProposalInputs(db: Db, job: ProposalJob) {
  const row = await db
    .selectFrom('workflows as w')
    .selectAll('w')
    .select((eb) => [
      jsonObjectFrom(
        eb
          .selectFrom('proposals as p')
          .select(['p.id', 'p.status', 'p.round', 'p.tool', 'p.offered_in_state'])
          .where('p.id', '=', job.proposalId)
          .whereRef('p.workflow_id', '=', 'w.id'),
      ).as('proposal'),
      eb
        .selectFrom('conversation_items as c')
        .select('c.item')
        .whereRef('c.workflow_id', '=', 'w.id')
        .where('c.kind', '=', 'function_call')
        .where('c.call_id', '=', job.callId)
        .as('call_item'),
    ])
    .where('w.id', '=', job.workflowId)
    .executeTakeFirst();
  if (!row?.proposal) return undefined;
  const { proposal, call_item: callItem, ...wf } = row;
  // A decided proposal is answered as such whatever else is missing; only an undecided one needs its call.
  if (!callItem && proposal.status === 'received') throw new Error(`proposal ${proposal.id}: no function_call item for call ${job.callId}`);
  return { wf, proposal, callItem: callItem ?? {} };
}

/**
 * Turns one proposal into a decided action (queue `proposals`): closed parsing of the
 * function_call as the model sent it, one normalization, identity from the workflow's
 * authenticated record, the authoritative read (order, or change and plan) and, for a refund, its
 * limits' sums read without the locks, then {@link decideAndRecord} in one transaction, which
 * confirms the decision under the limit locks last; when that check disagrees the transaction
 * rolls back and the proposal is decided again with the locks first (outcome suffixed
 * `:rechecked`; docs/decisions/0450-limit-locks-last-in-the-decision.md). An invalid proposal is
 * answered with a bounded validation result and nothing else runs. A redelivered job for a
 * decided proposal is a no-op.
 */
export async function processProposal(job: ProposalJob, deps: ProposalDeps): Promise<string> {
  const read = await readProposalInputs(deps.db, job);
  if (!read || read.proposal.status !== 'received') return 'already_decided';
  const parsed = parseProposal(String(read.callItem.name ?? ''), String(read.callItem.arguments ?? ''));
  return parsed.ok ? decideValid(job, deps, read, parsed) : rejectInvalid(job, deps, read, parsed);
}

type ProposalInputs = NonNullable<Awaited<ReturnType<typeof readProposalInputs>>>;
type Parsed = ReturnType<typeof parseProposal>;

/**
 * An invalid proposal: marked `invalid` (conditional on still `received`), audited as
 * `proposal.invalid`, and answered to the model with a bounded validation result labelled
 * Gatehouse's — nothing else is read or called. Returns `invalid:<error>`.
 */
async function rejectInvalid(
  job: ProposalJob,
  deps: ProposalDeps,
  { wf, proposal }: ProposalInputs,
  parsed: Extract<Parsed, { ok: false }>,
): Promise<string> {
  const rows = await inTransaction(deps.db, async (trx) => {
    const upd = await trx
      .updateTable('proposals')
      .set({ status: 'invalid', validation_error: JSON.stringify({ error: parsed.error, issues: parsed.issues }) })
      .where('id', '=', proposal.id)
      .where('status', '=', 'received')
      .returning('id')
      .executeTakeFirst();
    if (!upd) return [] as OutboxRow[];
    await recordAudit(trx, {
      type: 'proposal.invalid',
      service: 'policy-gateway',
      runId: wf.id,
      step: proposal.round,
      actorHash: actorHash(deps.auditHmacKey, wf.user_id),
      tool: proposal.tool,
      callId: job.callId,
      outcome: parsed.error,
      revisions: { toolCatalog: wf.catalog_digest, policy: deps.bundles[wf.pack].revision, release: wf.release_id },
    });
    const output = toSafeOutput(
      proposal.tool,
      { executed: false, status: 'validation_failed', error: parsed.error, issues: parsed.issues },
      'gatehouse',
    );
    return [await enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: job.callId, output })];
  });
  await deps.relay.publish(rows);
  return `invalid:${parsed.error}`;
}

/**
 * A valid proposal: the authoritative read and, for a refund, its limits' sums without the
 * locks, then the decision in one transaction confirmed under the limit locks last; when the
 * limits changed under it, decided again with the locks first (ADR 0450). Returns the outcome.
 */
async function decideValid(
  job: ProposalJob,
  deps: ProposalDeps,
  { wf, proposal }: ProposalInputs,
  parsed: Extract<Parsed, { ok: true }>,
): Promise<string> {
  const { db, bundles } = deps;
  // Read only for a known user and a tool of the workflow's pack offered in the proposal's state;
  // R2/C2 check the tenant before any rule uses it. A refund's sums are read beside the order,
  // without the limit locks: the decision is confirmed under them last (ADR 0450).
  const [record, unlockedSums] = await Promise.all([
    readAuthoritative(db, deps.stagingUrl, { ...wf, offeredInState: proposal.offered_in_state ?? wf.state }, parsed),
    unlockedRefundSums(db, wf, parsed),
  ]);
  const decide = (limitLocks: 'last' | 'first') =>
    inTransaction(db, async (trx) => {
      const claimed = await trx
        .updateTable('proposals')
        .set({ status: 'valid' })
        .where('id', '=', proposal.id)
        .where('status', '=', 'received')
        .returning('id')
        .executeTakeFirst();
      if (!claimed) return { outcome: 'already_decided', rows: [] as OutboxRow[] };
      return decideAndRecord(trx, {
        wf,
        proposalId: proposal.id,
        round: proposal.round,
        callId: job.callId,
        parsed,
        record,
        bundles,
        auditHmacKey: deps.auditHmacKey,
        service: 'policy-gateway',
        unlockedSums,
        limitLocks,
      });
    });
  const result = await decide('last').catch(async (err: unknown) => {
    // The limits changed under the decision: it rolled back whole; decide under the locks.
    if (!(err instanceof FactsChangedAtDecision)) throw err;
    recordLimitRecheck('decision', proposal.tool);
    deps.log.info(
      { workflowId: wf.id, proposalId: proposal.id },
      'refund limits changed while deciding; deciding again under the limit locks',
    );
    const again = await decide('first');
    return { ...again, outcome: `${again.outcome}:rechecked` };
  });
  await deps.relay.publish(result.rows);
  return result.outcome;
}
