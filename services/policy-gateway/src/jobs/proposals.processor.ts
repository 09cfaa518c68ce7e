import { randomUUID } from 'node:crypto';
import { approvalRequestsQueue, executionsQueue, loadWorld, resultsQueue, type ProposalJob } from '@gatehouse/contracts';
import { actorHash, enqueueInTransaction, inTransaction, operationKeyHash, recordAudit, type Db, type OutboxRow } from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import { eligibleTools, evaluateSupport, type SupportBundle, type SupportFacts } from '@gatehouse/policy';
import { digestOf, parseProposal, supportTools, toSafeOutput } from '@gatehouse/tools';
import { fetchOrder, lookupUser, recordedRefundsCents } from '../domain/facts.ts';

/** Dependencies of {@link processProposal}. */
export interface ProposalDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  bundle: SupportBundle;
  stagingUrl: string;
  auditHmacKey: string;
}

const HOUR_MS = 3_600_000;

/**
 * Turns one proposal into a decided action (queue `proposals`): closed parsing, one
 * normalization, identity from the workflow's authenticated record, authoritative facts,
 * policy decision, action version and digest — then, in one transaction, the action row, the
 * decision log, the audit event and the next job (execution, approval request, or the bounded
 * result for the model). A redelivered job for a decided proposal is a no-op.
 */
export async function processProposal(job: ProposalJob, deps: ProposalDeps): Promise<string> {
  const { db, bundle } = deps;
  const proposal = await db.selectFrom('proposals').selectAll().where('id', '=', job.proposalId).executeTakeFirst();
  if (!proposal || proposal.status !== 'received') return 'already_decided';
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).executeTakeFirstOrThrow();
  const callItem = await db
    .selectFrom('conversation_items')
    .select('item')
    .where('workflow_id', '=', wf.id)
    .where('kind', '=', 'function_call')
    .where('call_id', '=', job.callId)
    .executeTakeFirstOrThrow();
  const rawArguments = String(callItem.item.arguments ?? '');
  const actor = actorHash(deps.auditHmacKey, wf.user_id);
  const revisions = { toolCatalog: wf.catalog_digest, policy: bundle.revision, release: wf.release_id };

  const parsed = parseProposal(proposal.tool, rawArguments);
  if (!parsed.ok) {
    const rows = await inTransaction(db, async (trx) => {
      const upd = await trx
        .updateTable('proposals')
        .set({ status: 'invalid', validation_error: JSON.stringify({ error: parsed.error, issues: parsed.issues }) })
        .where('id', '=', proposal.id)
        .where('status', '=', 'received')
        .returning('id')
        .executeTakeFirst();
      if (!upd) return [] as OutboxRow[];
      await recordAudit(trx, { type: 'proposal.invalid', service: 'policy-gateway', runId: wf.id, step: proposal.round, actorHash: actor, tool: proposal.tool, callId: job.callId, outcome: parsed.error, revisions });
      const output = toSafeOutput(proposal.tool, { executed: false, status: 'validation_failed', error: parsed.error, issues: parsed.issues }, 'gatehouse');
      return [await enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: job.callId, output })];
    });
    await deps.relay.publish(rows);
    return `invalid:${parsed.error}`;
  }

  // Identity is derived from the workflow's authenticated record, never from the proposal.
  const user = lookupUser(wf.user_id, wf.tenant);
  const orderId = String(parsed.args.orderId);
  const world = loadWorld();
  const order = user ? await fetchOrder(deps.stagingUrl, orderId) : null;
  // Facts about other tenants never feed the rules: R2 denies on the tenant check first.
  const inTenant = order && user && order.tenant === user.tenant;
  const facts: SupportFacts = {
    user,
    agentGrantedTools: world.agent.grantedTools,
    eligibleTools: eligibleTools(supportTools, wf, world.agent.grantedTools).map((t) => t.name),
    tool: { name: parsed.tool.name, scope: parsed.tool.scope },
    args: parsed.args,
    order,
    priorRefundsOnOrderCents: inTenant ? await recordedRefundsCents(db, { tenant: wf.tenant, orderId }) : 0,
    userRefunds24hCents: inTenant ? await recordedRefundsCents(db, { tenant: wf.tenant, userId: wf.user_id, sinceMs: 24 * HOUR_MS }) : 0,
    agentRefunds1hCents: inTenant ? await recordedRefundsCents(db, { sinceMs: HOUR_MS }) : 0,
  };
  const decision = evaluateSupport(facts, bundle);

  const result = await inTransaction(db, async (trx) => {
    const locked = await trx.selectFrom('workflows').select(['id', 'state']).where('id', '=', wf.id).forUpdate().executeTakeFirstOrThrow();
    const claimed = await trx.updateTable('proposals').set({ status: 'valid' }).where('id', '=', proposal.id).where('status', '=', 'received').returning('id').executeTakeFirst();
    if (!claimed) return { outcome: 'already_decided', rows: [] as OutboxRow[] };
    const last = await trx.selectFrom('actions').select(({ fn }) => fn.max('version').as('v')).where('workflow_id', '=', wf.id).executeTakeFirst();
    const version = Number(last?.v ?? 0) + 1;
    const previous = await trx
      .selectFrom('actions')
      .select(['version'])
      .where('workflow_id', '=', wf.id)
      .where('tool', '=', parsed.tool.name)
      .where('target', '=', parsed.target)
      .orderBy('version', 'desc')
      .executeTakeFirst();
    const digest = digestOf({
      tool: parsed.tool.name,
      target: parsed.target,
      arguments: parsed.args,
      actor: wf.user_id,
      tenant: wf.tenant,
      policyRevision: decision.policyRevision,
      actionVersion: version,
    });
    const actionId = randomUUID();
    const operationKey = `${wf.id}:action:${version}`;
    const status = decision.decision === 'DENY' ? 'denied' : decision.decision === 'ALLOW' ? 'approved' : 'pending_approval';
    await trx
      .insertInto('actions')
      .values({
        id: actionId,
        workflow_id: wf.id,
        proposal_id: proposal.id,
        call_id: job.callId,
        version,
        supersedes_version: previous?.version ?? null,
        tool: parsed.tool.name,
        target: parsed.target,
        arguments: JSON.stringify(parsed.args),
        digest,
        decision: decision.decision,
        rule_id: decision.ruleId,
        policy_revision: decision.policyRevision,
        status,
        operation_key: operationKey,
        release_id: wf.release_id,
        facts: JSON.stringify({
          orderPaidCents: inTenant ? order.paid : null,
          orderStatus: inTenant ? order.status : null,
          orderRegion: inTenant ? order.region : null,
          priorRefundsOnOrderCents: facts.priorRefundsOnOrderCents,
          requesterRegion: user?.region ?? null,
        }),
      })
      .execute();
    await trx
      .insertInto('decision_log')
      .values({
        workflow_id: wf.id,
        proposal_id: proposal.id,
        action_id: actionId,
        tool: parsed.tool.name,
        decision: decision.decision,
        rule_id: decision.ruleId,
        policy_revision: decision.policyRevision,
        detail: JSON.stringify({ reason: decision.reason, version, digest }),
      })
      .execute();
    await recordAudit(trx, {
      type: 'policy.decision',
      service: 'policy-gateway',
      runId: wf.id,
      step: proposal.round,
      actorHash: actor,
      tool: parsed.tool.name,
      actionDigest: digest,
      actionVersion: version,
      operationKeyHash: operationKeyHash(operationKey),
      callId: job.callId,
      ruleId: decision.ruleId,
      decision: decision.decision,
      revisions,
    });
    let row: OutboxRow;
    if (decision.decision === 'ALLOW') {
      await trx.updateTable('workflows').set({ state: 'executing', updated_at: new Date() }).where('id', '=', locked.id).execute();
      row = await enqueueInTransaction(trx, executionsQueue, { release: wf.release_id, workflowId: wf.id, actionId, actionVersion: version, approvalId: null });
    } else if (decision.decision === 'REQUIRE_APPROVAL') {
      await trx.updateTable('workflows').set({ state: 'awaiting_approval', updated_at: new Date() }).where('id', '=', locked.id).execute();
      row = await enqueueInTransaction(trx, approvalRequestsQueue, { release: wf.release_id, workflowId: wf.id, actionId, actionVersion: version });
    } else {
      // Bounded denial: the rule id, never other tenants' data or the full reason.
      const output = toSafeOutput(parsed.tool.name, { executed: false, status: 'denied', ruleId: decision.ruleId, policyRevision: decision.policyRevision }, 'gatehouse');
      row = await enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: job.callId, output });
    }
    return { outcome: `${decision.decision}:${decision.ruleId}`, rows: [row] };
  });
  await deps.relay.publish(result.rows);
  return result.outcome;
}
