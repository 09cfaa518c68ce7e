import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import { approvalRequestsQueue, canonicalJson, ConflictError, executionsQueue, resultsQueue, testFaults } from '@gatehouse/contracts';
import {
  actorHash,
  enqueueInTransaction,
  lockWorkflowForDecision,
  operationKeyHash,
  recordAudit,
  transitionAction,
  transitionWorkflow,
  ticketOperationKey,
  approvalAwaitedStep,
  voidOpenApprovals,
  withAuditEvent,
  type ActionsTable,
  type OutboxRow,
  type DecisionContext,
  type Trx,
  type WorkflowsTable,
  type WorkflowState,
} from '@gatehouse/ledger';
import { digestOf, toSafeOutput, type ParsedProposal } from '@gatehouse/tools';
import type { PolicyBundles } from './bundle.ts';
import { evaluateAction, type AuthoritativeRecord, type Evaluation } from './evaluate.ts';
import type { RefundSums } from './facts.ts';
import type { PolicyDecision } from './support.rules.ts';

type Workflow = Selectable<WorkflowsTable>;
type Action = Selectable<ActionsTable>;

/** Statuses of an action that a duplicate proposal is suppressed against. */
const LIVE = ['pending_approval', 'approved', 'running', 'succeeded', 'failed_unknown'];

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE=1` removes the suppression
 * of a repeated proposal within the run (control-removed test: "20.00" then 20 then pays twice).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
export function proposalDedupeRemoved(): boolean {
  return testFaults().disableProposalDedupe;
}

/**
 * Thrown by a decision written on refund sums read without the limit locks when the same check,
 * made last under the locks, gives another decision, rule, reason or facts snapshot: the
 * transaction must roll back (nothing of the decision survives), and the proposal is decided
 * again with `limitLocks: 'first'`, which decides on what the locks protect
 * (docs/decisions/0450-limit-locks-last-in-the-decision.md). HTTP 409 if it ever escaped; it never
 * leaves the policy gateway.
 */
export class FactsChangedAtDecision extends ConflictError {
  readonly actionId: string;
  constructor(actionId: string) {
    super(
      'facts_changed_at_decision',
      `the refund limits of action ${actionId} changed while it was decided; the decision is rolled back, to be made again under the limit locks`,
    );
    this.actionId = actionId;
  }
}

/** Input of {@link decideAndRecord}. */
export interface DecideInput {
  wf: Workflow;
  proposalId: string;
  round: number;
  callId: string;
  parsed: Pick<ParsedProposal, 'tool' | 'args' | 'target'>;
  /** The authoritative record (order, or change and plan), read before the transaction. */
  record: AuthoritativeRecord;
  /** The active bundle of each pack; the workflow's pack picks one. */
  bundles: PolicyBundles;
  auditHmacKey: string;
  service: string;
  /** Set by the executor: the approved action whose facts changed before it could run. */
  reevaluates?: Action;
  /**
   * Refund sums read before the transaction without the limit locks ({@link unlockedRefundSums}):
   * the decision is written on them and confirmed last, under the locks, so the locks are held
   * for their sums and the COMMIT only (ADR 0450). Ignored with `reevaluates` or
   * `limitLocks: 'first'`.
   */
  unlockedSums?: RefundSums;
  /**
   * `last` (default): with `unlockedSums`, confirm under the limit locks after the writes,
   * throwing {@link FactsChangedAtDecision} when the check differs. `first`: take the locks
   * before the sums and decide on them (the second attempt after that error).
   */
  limitLocks?: 'last' | 'first';
}

/** What was decided and the jobs to publish after commit. */
export interface DecideOutcome {
  outcome: string;
  actionId: string;
  version: number;
  decision: PolicyDecision | null;
  rows: OutboxRow[];
}

/**
 * Supersedes one not-yet-claimed action version (docs/product/states.md#action): status `superseded`, its pending or
 * approved approvals `void` (audited), so no stale approval can ever be consumed. The caller
 * answers the action's call (`{executed: false, reason: "superseded"}`) its own way.
 * Returns the voided approval ids.
 */
export async function supersedeAction(
  trx: Trx,
  wf: Pick<Workflow, 'id' | 'release_id'>,
  a: Pick<Action, 'id' | 'tool' | 'version' | 'digest' | 'call_id'>,
  service: string,
): Promise<string[]> {
  await transitionAction(trx, a.id, { to: 'superseded' });
  return voidOpenApprovals(trx, wf, a, 'superseded', service);
}

async function supersede(
  trx: Trx,
  wf: Workflow,
  a: Pick<Action, 'id' | 'tool' | 'version' | 'digest' | 'call_id'>,
  answerCall: boolean,
  service: string,
): Promise<OutboxRow[]> {
  await supersedeAction(trx, wf, a, service);
  if (!answerCall) return [];
  const output = toSafeOutput(a.tool, { executed: false, reason: 'superseded' }, 'gatehouse');
  return [await enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: a.call_id, output })];
}

/**
 * Decides one normalized proposal and records it, in the caller's transaction (docs/product/policy-rules.md,
 * docs/product/states.md#action):
 * - the same normalized call again in the run (same tool, target and normalized arguments as a
 *   live action) is `suppressed` and answered with the original's outcome (no new effect);
 * - another proposal for the same tool and target is a separate action (four refunds of one
 *   order are four refunds); after a follow-up message superseded an earlier one, it records
 *   that version in `supersedes_version` (the amendment);
 * - facts are loaded, policy decides, and the action version is written with its digest
 *   (RFC 8785 JCS over tool, target, arguments, actor, tenant, policy revision, version), its
 *   operation key from the run's tenant, ticket id and version (`ticketOperationKey`, ADR 0789),
 *   the decision log, the audit event and the next job: execution (ALLOW), approval request
 *   (REQUIRE_APPROVAL) or the bounded denial for the model (DENY);
 * - a refund's limits are read under their locks: with `unlockedSums`, the same check runs again
 *   last, under the locks, and must agree (ADR 0450); otherwise the locks come before the sums.
 * With `reevaluates`, the executor found the facts changed: that action is superseded and its
 * call is answered by the new version's outcome. A proposal whose call was made before the
 * requester's latest follow-up is decided and recorded, then superseded at once (unless denied)
 * and its call answered `superseded`: the model proposes again on the transcript with the
 * follow-up (docs/product/public-contract.md#follow-up-messages).
 * @throws FactsChangedAtDecision when the check under the locks disagrees (`limitLocks: 'last'`):
 *   the caller rolls back and decides again with `limitLocks: 'first'`.
 */
export async function decideAndRecord(trx: Trx, input: DecideInput): Promise<DecideOutcome> {
  const { wf, parsed } = input;
  // The follow-up check is the gateway's (ADR 0490): the executor's re-evaluation does not run it.
  const context = await lockWorkflowForDecision(trx, wf.id, { proposalId: input.proposalId, followUp: !input.reevaluates });
  if (!context) throw new Error(`workflow ${wf.id} not found`);
  // Every version of the run (a run has a few): the same tool and target's, and the last number.
  const versions = await trx.selectFrom('actions').selectAll().where('workflow_id', '=', wf.id).orderBy('version', 'desc').execute();
  const sameTarget = versions.filter((a) => a.tool === parsed.tool.name && a.target === parsed.target);
  const amended =
    input.reevaluates ?? sameTarget.find((a) => a.status === 'superseded' && !sameTarget.some((b) => b.supersedes_version === a.version));
  const version = (versions[0]?.version ?? 0) + 1;
  const actionId = randomUUID();
  // From the ticket, not the run's random id: the same ticket run again after the ledger lost
  // its first run presents the same keys at the systems of record (ADR 0789).
  const operationKey = ticketOperationKey(wf, version);
  const base: NewAction = {
    id: actionId,
    workflow_id: wf.id,
    proposal_id: input.proposalId,
    call_id: input.callId,
    version,
    supersedes_version: amended?.version ?? null,
    tool: parsed.tool.name,
    target: parsed.target,
    arguments: JSON.stringify(parsed.args),
    operation_key: operationKey,
    release_id: wf.release_id,
  };

  const args = canonicalJson(parsed.args);
  const previous =
    input.reevaluates || proposalDedupeRemoved()
      ? undefined
      : sameTarget.find((a) => LIVE.includes(a.status) && canonicalJson(a.arguments) === args);
  if (previous) return recordSuppressed(trx, input, base, previous);

  const rows: OutboxRow[] = [];
  if (input.reevaluates) {
    const claimed = await trx
      .selectFrom('operations')
      .select('status')
      .where('action_id', '=', input.reevaluates.id)
      .where('status', '!=', 'pending')
      .executeTakeFirst();
    if (!claimed) rows.push(...(await supersede(trx, wf, input.reevaluates, input.reevaluates.call_id !== input.callId, input.service)));
  }

  const unlockedSums = input.reevaluates || input.limitLocks === 'first' ? undefined : input.unlockedSums;
  const evaluation = await evaluateAction(trx, {
    wf,
    proposalId: input.proposalId,
    parsed,
    record: input.record,
    bundles: input.bundles,
    context,
    unlockedSums,
    ...(input.reevaluates ? { excludeActionId: input.reevaluates.id, atExecution: true } : {}),
  });
  const { decision } = evaluation;
  const digest = await insertDecidedAction(trx, input, base, evaluation);
  if (!input.reevaluates && context.followedUp && decision.decision !== 'DENY' && !followUpCheckRemoved()) {
    // The rep wrote after the model made this call: like an action not yet claimed when a
    // follow-up arrives, it is superseded before anything runs, and its call answered so.
    rows.push(...(await supersede(trx, wf, { ...base, digest }, true, input.service)));
    return { outcome: `${decision.decision}:${decision.ruleId}:superseded_by_follow_up`, actionId, version, decision, rows };
  }
  rows.push(await routeDecision(trx, input, context, { actionId, version, decision }));
  // Last, so the limit locks are held for their sums and the COMMIT only (ADR 0450).
  if (unlockedSums) await confirmUnderLimitLocks(trx, input, context, { actionId, evaluation });
  return { outcome: `${decision.decision}:${decision.ruleId}`, actionId, version, decision, rows };
}

/** The columns of an action version that do not depend on its decision. */
type NewAction = Pick<
  Action,
  'id' | 'workflow_id' | 'proposal_id' | 'call_id' | 'version' | 'supersedes_version' | 'tool' | 'target' | 'operation_key' | 'release_id'
> & { arguments: string };

/** The fields every `policy.decision` audit event of one proposal carries: run, step, actor, tool, version, call. */
function decisionEventBase(input: DecideInput, actionVersion: number) {
  return {
    type: 'policy.decision' as const,
    service: input.service,
    runId: input.wf.id,
    step: input.round,
    actorHash: actorHash(input.auditHmacKey, input.wf.user_id),
    tool: input.parsed.tool.name,
    actionVersion,
    callId: input.callId,
  };
}

/**
 * Records a repeated proposal as `suppressed` against the live version `previous` and answers its
 * call with the original's outcome (its stored result once it succeeded), with its audit event.
 */
async function recordSuppressed(trx: Trx, input: DecideInput, base: NewAction, previous: Action): Promise<DecideOutcome> {
  const { wf, parsed } = input;
  const op = await trx.selectFrom('operations').select(['status', 'result']).where('action_id', '=', previous.id).executeTakeFirst();
  await trx
    .insertInto('actions')
    .values({
      ...base,
      digest: previous.digest,
      decision: previous.decision,
      rule_id: previous.rule_id,
      policy_revision: previous.policy_revision,
      status: 'suppressed',
      facts: JSON.stringify({ duplicateOf: previous.version }),
    })
    .execute();
  await recordAudit(trx, {
    ...decisionEventBase(input, base.version),
    decision: 'SUPPRESSED',
    outcome: `duplicate_of_v${previous.version}`,
    revisions: { policy: previous.policy_revision, release: wf.release_id },
  });
  const output =
    op?.status === 'succeeded' && op.result
      ? { ...(op.result as Record<string, unknown>), duplicateOf: previous.version }
      : toSafeOutput(
          parsed.tool.name,
          { executed: false, status: 'suppressed', duplicateOf: previous.version, originalStatus: previous.status },
          'gatehouse',
        );
  const row = await enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: input.callId, output });
  return { outcome: `suppressed:v${previous.version}`, actionId: base.id, version: base.version, decision: null, rows: [row] };
}

/**
 * Writes the decided action version with its digest, its decision_log row and its `policy.decision`
 * audit event in one statement (ADR 0420; the decision_log's reference to the action is checked
 * at the statement's end). Returns the action digest.
 */
async function insertDecidedAction(trx: Trx, input: DecideInput, base: NewAction, evaluation: Evaluation): Promise<string> {
  const { wf, parsed } = input;
  const { decision, snapshot } = evaluation;
  const digest = digestOf({
    tool: parsed.tool.name,
    target: parsed.target,
    arguments: parsed.args,
    actor: wf.user_id,
    tenant: wf.tenant,
    policyRevision: decision.policyRevision,
    actionVersion: base.version,
  });
  const status = decision.decision === 'DENY' ? 'denied' : decision.decision === 'ALLOW' ? 'approved' : 'pending_approval';
  await withAuditEvent(trx, {
    ...decisionEventBase(input, base.version),
    actionDigest: digest,
    operationKeyHash: operationKeyHash(base.operation_key),
    ruleId: decision.ruleId,
    decision: decision.decision,
    outcome: input.reevaluates ? `reevaluated_v${input.reevaluates.version}` : null,
    revisions: { toolCatalog: wf.catalog_digest, policy: decision.policyRevision, release: wf.release_id },
  })
    .with('decision', (db) =>
      db.insertInto('decision_log').values({
        workflow_id: wf.id,
        proposal_id: input.proposalId,
        action_id: base.id,
        tool: parsed.tool.name,
        decision: decision.decision,
        rule_id: decision.ruleId,
        policy_revision: decision.policyRevision,
        detail: JSON.stringify({ reason: decision.reason, version: base.version, digest, reevaluated: Boolean(input.reevaluates) }),
      }),
    )
    .insertInto('actions')
    .values({
      ...base,
      digest,
      decision: decision.decision,
      rule_id: decision.ruleId,
      policy_revision: decision.policyRevision,
      status,
      facts: JSON.stringify({
        ...snapshot,
        ...(input.reevaluates ? { reevaluatedFromVersion: input.reevaluates.version } : {}),
      }),
    })
    .execute();
  return digest;
}

/**
 * The run's next step after a decision: ALLOW moves it to `executing` with the execution job,
 * REQUIRE_APPROVAL to `awaiting_approval` with the approval request, DENY answers the call with
 * the bounded denial (the rule id, never other tenants' data or the full reason). Returns the
 * outbox row to publish.
 */
async function routeDecision(
  trx: Trx,
  input: DecideInput,
  context: DecisionContext,
  d: { actionId: string; version: number; decision: PolicyDecision },
): Promise<OutboxRow> {
  const { wf, parsed } = input;
  const live: WorkflowState[] = ['received', 'investigating', 'awaiting_approval', 'executing'];
  const job = { release: wf.release_id, workflowId: wf.id, actionId: d.actionId, actionVersion: d.version };
  if (d.decision.decision === 'ALLOW') {
    await transitionWorkflow(trx, wf.id, { to: 'executing', nextStep: null, onlyFrom: live, lockedFrom: context.state });
    return enqueueInTransaction(trx, executionsQueue, { ...job, approvalId: null });
  }
  if (d.decision.decision === 'REQUIRE_APPROVAL') {
    await transitionWorkflow(trx, wf.id, {
      to: 'awaiting_approval',
      nextStep: approvalAwaitedStep(wf.pack, { tool: parsed.tool.name, target: parsed.target, version: d.version }),
      onlyFrom: live,
      lockedFrom: context.state,
    });
    return enqueueInTransaction(trx, approvalRequestsQueue, job);
  }
  const output = toSafeOutput(
    parsed.tool.name,
    { executed: false, status: 'denied', ruleId: d.decision.ruleId, policyRevision: d.decision.policyRevision },
    'gatehouse',
  );
  return enqueueInTransaction(trx, resultsQueue, { release: wf.release_id, workflowId: wf.id, callId: input.callId, output });
}

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_FOLLOW_UP_CHECK=1` lets a proposal made
 * before a follow-up be routed as if none came (control-removed test: the outdated refund runs).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function followUpCheckRemoved(): boolean {
  return testFaults().disableFollowUpCheck;
}

/**
 * Whether the test-only switch `GATEHOUSE_TEST_DISABLE_DECISION_RECHECK=1` removes the check under
 * the limit locks of a decision written on unlocked sums (control-removed test: concurrent
 * refunds on one order then dodge the auto limit).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function decisionRecheckRemoved(): boolean {
  return testFaults().disableDecisionRecheck;
}

/**
 * The check that makes a decision written on unlocked sums safe (ADR 0450): the limit locks are
 * taken now, the sums read again (the action just written left out), and the rules run on them.
 * Every decision that adds to one of these limits and committed before is counted, as if the
 * locks had been taken first; a decision committing later waits for this transaction's locks.
 * @throws FactsChangedAtDecision when the decision, rule, reason, policy revision or facts
 *   snapshot differ from what was written: the recorded figures must be the ones the locks protect.
 */
async function confirmUnderLimitLocks(
  trx: Trx,
  input: DecideInput,
  context: DecisionContext,
  written: { actionId: string; evaluation: Evaluation },
): Promise<void> {
  if (decisionRecheckRemoved()) return;
  const now = await evaluateAction(trx, {
    wf: input.wf,
    proposalId: input.proposalId,
    parsed: input.parsed,
    record: input.record,
    bundles: input.bundles,
    context,
    excludeActionId: written.actionId,
  });
  const was = written.evaluation;
  const same =
    now.decision.decision === was.decision.decision &&
    now.decision.ruleId === was.decision.ruleId &&
    now.decision.reason === was.decision.reason &&
    now.decision.policyRevision === was.decision.policyRevision &&
    canonicalJson(now.snapshot) === canonicalJson(was.snapshot);
  if (!same) throw new FactsChangedAtDecision(written.actionId);
}
