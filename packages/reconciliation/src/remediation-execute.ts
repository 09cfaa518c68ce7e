import { hostname } from 'node:os';
import { sql, type Selectable } from 'kysely';
import { mintDelegatedToken, type BindingTarget, type DelegationSigningKey } from '@gatehouse/credentials';
import {
  actorHash,
  inTransaction,
  operationKeyHash,
  recordAudit,
  transitionAction,
  stopRun,
  transitionWorkflow,
  type ActionsTable,
  type OutboxRow,
  type Trx,
  consumeApproval,
  grantLease,
  leaseIsLive,
  lockActionAndReserve,
  raiseFence,
  recordOutcome,
  resetToPending,
  readCredentialEpoch,
  AuditUnavailable,
  DependencyUnavailable,
  DEFAULT_AUDIT_GATE,
  requireAuditHealthy,
  type AuditGate,
  containedAs,
  heldByContainment,
  lockContainment,
} from '@gatehouse/ledger';
import { REMEDIATION_TOOL } from './classes.ts';
import { cancelShipment, replayRefund, reverseRefund, type CompensationResult } from './compensations.ts';
import { approverCeilingCents, findItem, RemediationRefused, type RemediationDeps } from './remediation.ts';
import { reconciledOutput, settleOperation } from './settle.ts';
import type { WorklistItem } from './worklist.ts';

/** Settings of executing approved remediations. */
export interface ExecuteDeps extends RemediationDeps {
  /** Ed25519 key minting the compensating calls' delegated tokens (the minting side's). */
  signingKey: DelegationSigningKey;
  /** Lease on the remediation's operation, ms (default 30 000). */
  leaseMs?: number;
  /** `act.sub` of the delegated token (default `gatehouse-reconciliation`). */
  actorId?: string;
  /** The audit-health gate checked before any claim (default `DEFAULT_AUDIT_GATE`; docs/product/invariants.md#evidence). */
  auditGate?: AuditGate;
}

/**
 * What a `retry` outcome of a remediation or a change cancel waits for, as a typed field (the
 * `reason` string stays as the audit and API carry it):
 * - `system_of_record`: the downstream did not process the call — no answer, 408, 429 or 5xx
 *   (`isOutageStatus`); the same key is sent again next time (idempotent);
 * - `postgres`: the ledger's credential epoch could not be read (`epoch_unavailable`): nothing
 *   claimed, minted or sent;
 * - `audit`: audit storage is unhealthy (`audit_unavailable: …`): nothing claimed or sent;
 * - `containment`: `tool` is switched off or its re-enable stage does not admit the remediation
 *   (`tool_disabled:<tool>`, docs/decisions/0692): nothing claimed or sent, its approval unused.
 */
export type RetryWait = { on: 'system_of_record' } | { on: 'postgres' } | { on: 'audit' } | { on: 'containment'; tool: string };

/** Where a remediation stands after {@link executeRemediation}. */
export type RemediationOutcome =
  | { state: 'awaiting_approval'; itemId: string; approvalId: string }
  /** The lead denied it, or it expired or was voided: the item is open for another request. */
  | { state: 'refused'; itemId: string; reason: string }
  /**
   * Another process holds the remediation's lease, until `leaseUntil` when the claim read it (a
   * process that died holds it until then); absent when a newer claim fenced this one out.
   */
  | { state: 'busy'; itemId: string; leaseUntil?: Date }
  /**
   * The downstream did not answer (the same key is sent again next time, idempotent), or
   * containment holds the remediation (`tool_disabled:<tool>`: nothing claimed or sent, its
   * approval left unused, ADR 0692): the repeatable job tries it again. `waitingFor` says which.
   */
  | { state: 'retry'; itemId: string; reason: string; waitingFor: RetryWait }
  /**
   * The downstream refused (a 4xx: it understood the call and rejected it; `reason` is
   * `<status>:<its reason>`): the remediation ended and is never sent again under its key; the
   * item is open for another request, as `nextStep` says ({@link refusedNextStep}).
   */
  | { state: 'failed'; itemId: string; reason: string; nextStep: string }
  | { state: 'resolved'; itemId: string; resolution: string; resolvedBy: string; rows: OutboxRow[] };

const owner = `${hostname()}:${process.pid}:reconciliation`;

/**
 * What an operator does after the downstream refused a remediation (reason `<status>:<its
 * reason>`): nothing is retried, the item is open again, another remediation is asked for.
 */
function refusedNextStep(item: Pick<WorklistItem, 'id'>, reason: string): string {
  return (
    `The downstream refused the remediation (${reason}); it is not sent again. ` +
    `Look at the item and request another remediation: gatehouse reconcile resolve ${item.id} --<remediation>.`
  );
}
type Action = Selectable<ActionsTable>;

/**
 * Reopens the item after a refused remediation (another can be requested), conditional on it
 * still naming this approval; the remediation's workflow stops with the reason.
 */
async function reopen(trx: Trx, item: WorklistItem, approvalId: string, reason: string): Promise<void> {
  const ap = await trx.selectFrom('approvals').select('workflow_id').where('id', '=', approvalId).executeTakeFirstOrThrow();
  await stopRun(
    trx,
    { id: ap.workflow_id },
    reason === 'approval_expired' ? 'approval_expired' : 'denied',
    `Remediation ${item.remediation} not executed (${reason}); request another with gatehouse reconcile resolve.`,
    'reconciliation',
    { onlyFrom: ['awaiting_approval', 'executing'] },
  );
  await trx
    .updateTable('reconciliation_items')
    .set({ remediation: null, approval_id: null })
    .where('id', '=', item.id)
    .where('approval_id', '=', approvalId)
    .execute();
}

type Claim =
  | { kind: 'claimed'; action: Action; fence: number; originalFence: number | null; approver: string; tenant: string }
  | { kind: 'done' }
  | { kind: 'busy'; leaseUntil?: Date }
  /** Containment holds it for `tool` ({@link containmentHolds}): nothing was written. */
  | { kind: 'held'; tool: string }
  | { kind: 'refused'; reason: string }
  | { kind: 'failed'; reason: string };

type Claimed = Extract<Claim, { kind: 'claimed' }>;

/**
 * The fenced claim of a remediation, one transaction (lock order workflows → actions →
 * operations → approvals): reserves the operation `recon_<itemId>`, consumes the approval only
 * if it still names exactly this action (id, tool, digest, version; unexpired), raises the
 * fencing token of the original operation for a replay (a stale executor's request under that
 * key is then refused downstream), and grants the lease with the write-ahead mark. A remediation
 * that performs an agent tool's effect is first checked against that tool's containment
 * ({@link containmentHolds}) and, when held, nothing is written (`held`).
 */
async function claim(trx: Trx, item: WorklistItem, approvalId: string, deps: ExecuteDeps): Promise<Claim> {
  // First, before any row lock (ADR 0683's order): a switch-off committed before this claim holds it.
  const held = await containmentHolds(trx, item, approvalId);
  if (held) return { kind: 'held', tool: held };
  const ap = await trx.selectFrom('approvals').selectAll().where('id', '=', approvalId).executeTakeFirstOrThrow();
  const wf = await trx
    .selectFrom('workflows')
    .select(['id', 'tenant'])
    .where('id', '=', ap.workflow_id)
    .forUpdate()
    .executeTakeFirstOrThrow();
  const locked = await lockActionAndReserve(trx, ap.action_id);
  if (!locked?.op) throw new Error(`remediation action ${ap.action_id} is missing`);
  const { action, op } = locked;
  if (op.status === 'succeeded') return { kind: 'done' };
  if (op.status === 'failed') return { kind: 'failed', reason: op.error ?? 'failed' };
  if (leaseIsLive(op)) return { kind: 'busy', leaseUntil: new Date(op.lease_expires_at!) };
  const audit = {
    service: 'reconciliation',
    runId: wf.id,
    actorHash: actorHash(deps.hmacKey, ap.approver ?? 'unknown'),
    tool: action.tool,
    actionDigest: action.digest,
    actionVersion: action.version,
    approvalId: ap.id,
    operationKeyHash: operationKeyHash(op.key),
    revisions: { policy: action.policy_revision, release: action.release_id },
  };
  if (ap.status === 'approved') {
    // The remediation's approval binds the action (id, tool, digest, version), not a policy revision.
    const consumed = await consumeApproval(trx, ap.id, { action, policyRevision: false });
    if (!consumed) return { kind: 'refused', reason: 'approval_expired' };
    await recordAudit(trx, { ...audit, type: 'approval.consumed' });
  } else if (ap.status !== 'used') return { kind: 'refused', reason: `approval_${ap.status}` };
  let originalFence: number | null = null;
  if (item.remediation === 'replay' && item.operation_key) {
    originalFence = await raiseFence(trx, item.operation_key);
    if (originalFence === null) return { kind: 'busy' };
  }
  // The write-ahead mark goes with the claim: the compensating call follows at once.
  const granted = await grantLease(trx, op, { owner, leaseMs: deps.leaseMs ?? 30_000, dispatchNow: true, workflow: { nextStep: null } });
  await recordAudit(trx, { ...audit, type: 'operation.claimed', attempts: op.attempts + 1 });
  return { kind: 'claimed', action, fence: granted.fencingToken, originalFence, approver: ap.approver ?? '', tenant: wf.tenant };
}

/**
 * Whether containment holds the remediation of `item` (docs/decisions/0692-containment-holds-a-replayed-refund.md):
 * when its compensation performs a catalog tool's effect (the ledger's `containedAs`: a
 * `replay_refund` pays as `issue_refund`), that tool's containment lock is taken `share` — the
 * caller's first statement, as in the executor's claim
 * (docs/decisions/0683-switch-off-serializes-with-the-claim.md), so a switch-off under way is
 * waited for and one committed before is seen — then the ledger's one rule, `heldByContainment`,
 * is read for the remediation's own workflow (approval `approvalId`'s), as the
 * `effect_after_switch_off` monitor judges its operation. Returns the catalog tool that holds it
 * (the outcome's reason is then `tool_disabled:<tool>`), else null. An undo is never held.
 */
async function containmentHolds(trx: Trx, item: WorklistItem, approvalId: string): Promise<string | null> {
  const tool = item.remediation ? containedAs(REMEDIATION_TOOL[item.remediation]) : null;
  if (!tool) return null;
  await lockContainment(trx, tool, 'share');
  const run = (col: 'tenant' | 'user_id') =>
    sql`(select ${sql.ref(`w.${col}`)} from approvals p join workflows w on w.id = p.workflow_id where p.id = ${approvalId}::uuid)`;
  const held = heldByContainment(sql`${tool}::text`, run('tenant'), run('user_id'));
  const { rows } = await sql<{ held: boolean }>`select ${held} as held`.execute(trx);
  return rows[0]?.held === true ? tool : null;
}

/**
 * Performs the compensation itself; ratify and adopt make no downstream call. Each token is
 * bound to its request: key, fence and target (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
 */
async function perform(deps: ExecuteDeps, item: WorklistItem, c: Claimed, epoch: number): Promise<CompensationResult> {
  const args = c.action.arguments;
  if (item.remediation === 'ratify' || item.remediation === 'adopt')
    return { status: 'succeeded', evidenceRef: `lead:${c.approver}`, data: {} };
  const mint = (aud: string, scope: string, key: string, fence: number, target: BindingTarget) =>
    mintDelegatedToken(
      {
        sub: c.approver,
        act: { sub: deps.actorId ?? 'gatehouse-reconciliation' },
        aud,
        scope,
        tenant: c.tenant,
        ceiling: approverCeilingCents(c.approver, c.tenant),
        epoch,
        op: key,
        fence,
        target,
      },
      deps.signingKey,
    );
  const key = c.action.operation_key;
  switch (item.remediation) {
    case 'reverse':
      return reverseRefund(
        {
          stagingUrl: deps.stagingUrl,
          key,
          fence: c.fence,
          token: await mint('payments', 'refund:reverse', key, c.fence, { refundId: String(args.ledgerRef) }),
        },
        String(args.ledgerRef),
        `reconciliation ${item.id}`,
      );
    case 'cancel_shipment':
      return cancelShipment(
        {
          stagingUrl: deps.stagingUrl,
          key,
          fence: c.fence,
          token: await mint('orders', 'shipment:cancel', key, c.fence, {
            orderId: String(args.orderId),
            shipmentId: String(args.shipmentId),
          }),
        },
        String(args.orderId),
        String(args.shipmentId),
      );
    case 'replay': {
      const original = String(args.operationKey);
      const fence = c.originalFence ?? 0;
      const step = await deps.db.selectFrom('actions').select('arguments').where('operation_key', '=', original).executeTakeFirst();
      return replayRefund(
        {
          stagingUrl: deps.stagingUrl,
          key: original,
          fence,
          token: await mint('payments', 'refund:create', original, fence, {
            orderId: String(args.orderId),
            amountCents: Number(args.amountCents),
          }),
        },
        {
          orderId: String(args.orderId),
          amountCents: Number(args.amountCents),
          reason: String(step?.arguments.reason ?? 'reconciliation replay'),
        },
      );
    }
    default:
      throw new RemediationRefused('unknown_remediation', `item ${item.id} names no remediation`);
  }
}

/**
 * One agent step as a settlement needs it — the operation as `settleOperation` takes it (key,
 * status, fencing token as text, workflow, action, the action's call, tool) and the action's
 * arguments — or undefined when no operation has that key.
 */
async function readStep(trx: Trx, key: string) {
  const r = await trx
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .select(['o.key', 'o.status', 'o.fencing_token', 'o.workflow_id', 'o.action_id', 'a.call_id', 'o.tool', 'a.arguments'])
    .where('o.key', '=', key)
    .executeTakeFirst();
  if (!r) return undefined;
  const step = {
    key: r.key,
    status: r.status,
    fencingToken: String(r.fencing_token),
    workflowId: r.workflow_id,
    actionId: r.action_id,
    callId: r.call_id,
    tool: r.tool,
  };
  return { step, arguments: r.arguments };
}

/** The `outcomes` a ratification of undecided reships binds (operation key → shipment id, or null: none), or null. */
function undecidedOutcomesOf(args: Record<string, unknown>): Record<string, string | null> | null {
  const o = args.outcomes;
  return o && typeof o === 'object' && !Array.isArray(o) ? (o as Record<string, string | null>) : null;
}

/**
 * Settles the undecided reships a lead ratified (a `shipment_count_mismatch` naming its in-flight
 * operations, docs/decisions/0691): each named step still in flight becomes `succeeded` with the
 * shipment the ratification names as its evidence, or `failed` (`reconciled_not_executed`) when it
 * names none — through {@link settleOperation}, so each is fenced, audited `operation.reconciled`,
 * answered, and a run parked in `needs_reconciliation` completes once none of its steps is
 * unknown. Keys in sorted order (one lock order between two ratifications); a step that moved on
 * meanwhile is left as it is. Returns the outbox rows to publish.
 */
async function settleUndecided(
  trx: Trx,
  item: WorklistItem,
  outcomes: Record<string, string | null>,
  by: { actor: string; hmacKey: string },
): Promise<OutboxRow[]> {
  const rows: OutboxRow[] = [];
  for (const key of Object.keys(outcomes).sort()) {
    const op = (await readStep(trx, key))?.step;
    if (!op || (op.status !== 'failed_unknown' && op.status !== 'running')) continue;
    const shipmentId = outcomes[key] ?? null;
    const status = shipmentId === null ? 'failed' : 'succeeded';
    const settled = await settleOperation(
      trx,
      op,
      {
        status,
        evidenceRef: shipmentId,
        output: reconciledOutput(op.tool, status, { orderId: item.order_id, shipmentId, resolvedBy: 'ratified' }),
        note: shipmentId === null ? 'ratified by a lead: no shipment is this reship' : `ratified by a lead: shipment ${shipmentId}`,
      },
      by,
      { frozenToo: true },
    );
    rows.push(...(settled ?? []));
  }
  return rows;
}

/**
 * Brings the original step in line with the repaired system of record: a reversal marks its
 * action `compensated`; an in-flight step (`failed_unknown`, or `running` past its lease) is
 * settled — succeeded when the system of record has the effect (a replay's refund its evidence),
 * failed when a lead ratified that it did not happen — and its result returned to the workflow; a
 * `failed` step whose refund a lead adopted is settled `succeeded` with that refund as evidence
 * (docs/decisions/0050). A settled (`succeeded`) step keeps its recorded evidence: a replay's
 * refund is recorded on the remediation's own operation. A ratification of undecided reships
 * settles each as it names ({@link settleUndecided}). Nothing changes silently: each write is
 * audited by the caller's `reconciliation.resolved` and, for a settled step, `operation.reconciled`.
 */
async function settleOriginal(
  trx: Trx,
  item: WorklistItem,
  result: Extract<CompensationResult, { status: 'succeeded' }>,
  by: { actor: string; hmacKey: string },
  args: Record<string, unknown>,
) {
  const outcomes = undecidedOutcomesOf(args);
  if (item.remediation === 'ratify' && outcomes) return settleUndecided(trx, item, outcomes, by);
  if (!item.operation_key) return [];
  const read = await readStep(trx, item.operation_key);
  if (!read) return [];
  const { step: op, arguments: stepArgs } = read;
  let rows: OutboxRow[] = [];
  const inFlight = op.status === 'failed_unknown' || op.status === 'running';
  // A failed step whose refund the ledger has under its key: the lead adopted that refund as the step's effect.
  const adoptedFailed = op.status === 'failed' && item.remediation === 'adopt';
  if (inFlight || adoptedFailed) {
    const happened = item.remediation !== 'ratify' || item.class !== 'in_flight_ledger_lacks_it';
    const evidence = item.remediation === 'replay' ? result.evidenceRef : item.ledger_ref;
    const data =
      item.remediation === 'replay' ? result.data : { ...stepArgs, refundId: item.ledger_ref, amountCents: Number(item.amount_cents) };
    rows =
      (await settleOperation(
        trx,
        op,
        {
          status: happened ? 'succeeded' : 'failed',
          evidenceRef: evidence,
          output: reconciledOutput(op.tool, happened ? 'succeeded' : 'failed', data),
          note: `${item.remediation} approved by a lead`,
        },
        by,
        { frozenToo: true },
      )) ?? [];
  }
  // A replay of a step that is already settled (`succeeded`) leaves its record as the executor wrote
  // it: a settled outcome is written once. The replay's refund is the remediation's own evidence
  // (its operation, the item's resolution, its audit).
  if (item.remediation === 'reverse') {
    await transitionAction(trx, op.actionId, { to: 'compensated' });
  }
  return rows;
}

/**
 * Executes a worklist item's remediation once its lead approved it, exactly once
 * (docs/product/reconciliation.md#remediations): the
 * approval is consumed atomically with the fenced claim of the operation `recon_<itemId>`; the
 * compensating call carries that key (a replay carries the original refund's key) and a freshly
 * minted delegated token whose subject is the approving lead and whose ceiling is their approve
 * limit (cents); the result is recorded under the fencing token, the original step is settled
 * (see {@link settleOriginal}), and the item is `resolved` with the lead's identity — audited as
 * `reconciliation.resolved`. Pending: nothing happens. Denied, expired or void: the item opens
 * again for another request. Safe to call repeatedly and concurrently (CLI and job).
 * @throws RemediationRefused when the item has no remediation requested or is unknown.
 * @throws AuditUnavailable when audit storage is unhealthy (`deps.auditGate`): nothing claimed or sent.
 */
export async function executeRemediation(deps: ExecuteDeps, itemIdOrPrefix: string): Promise<RemediationOutcome> {
  const item = await findItem(deps.db, itemIdOrPrefix);
  const ready = await readyToClaim(deps, item);
  if ('state' in ready) return ready;
  const c = await inTransaction(deps.db, (trx) => claim(trx, item, ready.approvalId, deps));
  if (c.kind !== 'claimed') return unclaimed(deps, item, ready.approvalId, c);
  const result = await perform(deps, item, c, ready.epoch);
  return inTransaction(deps.db, (trx) => recordRemediation(trx, deps, item, ready.approvalId, c, result));
}

/**
 * What must hold before a remediation's claim: the item open with a remediation requested, its
 * approval granted (pending → `awaiting_approval`; denied, expired or void → the item reopens),
 * audit storage healthy and the credential epoch readable (fail closed: nothing claimed).
 * Returns the outcome that ends here, or the approval and epoch the claim and token use.
 * @throws RemediationRefused when no remediation is requested.
 * @throws AuditUnavailable when audit storage is unhealthy.
 */
async function readyToClaim(deps: ExecuteDeps, item: WorklistItem): Promise<RemediationOutcome | { approvalId: string; epoch: number }> {
  if (item.status === 'resolved' || item.status === 'auto_resolved')
    return { state: 'resolved', itemId: item.id, resolution: item.resolution ?? '', resolvedBy: item.resolved_by ?? '', rows: [] };
  const approvalId = item.approval_id;
  if (!approvalId) throw new RemediationRefused('no_remediation', `item ${item.id} has no remediation requested`);
  const ap = await deps.db.selectFrom('approvals').select(['status']).where('id', '=', approvalId).executeTakeFirstOrThrow();
  if (ap.status === 'pending') return { state: 'awaiting_approval', itemId: item.id, approvalId };
  if (ap.status === 'denied' || ap.status === 'expired' || ap.status === 'void') {
    await inTransaction(deps.db, (trx) => reopen(trx, item, approvalId, `approval_${ap.status}`));
    return { state: 'refused', itemId: item.id, reason: `approval_${ap.status}` };
  }
  // No effect without audit: the approval is left unused (the caller holds or reports it).
  await requireAuditHealthy(deps.db, deps.auditGate ?? DEFAULT_AUDIT_GATE);
  // No token without the revocation epoch (fail closed): nothing is claimed, the next pass retries.
  try {
    return { approvalId, epoch: await readCredentialEpoch(deps.db) };
  } catch (err) {
    if (err instanceof DependencyUnavailable)
      return { state: 'retry', itemId: item.id, reason: 'epoch_unavailable', waitingFor: { on: 'postgres' } };
    throw err;
  }
}

/** The outcome of a claim that did not grant the lease ({@link claim}): nothing was sent. */
async function unclaimed(
  deps: ExecuteDeps,
  item: WorklistItem,
  approvalId: string,
  c: Exclude<Claim, Claimed>,
): Promise<RemediationOutcome> {
  switch (c.kind) {
    case 'busy':
      return { state: 'busy', itemId: item.id, ...(c.leaseUntil ? { leaseUntil: c.leaseUntil } : {}) };
    case 'held':
      return { state: 'retry', itemId: item.id, reason: `tool_disabled:${c.tool}`, waitingFor: { on: 'containment', tool: c.tool } };
    case 'refused':
    case 'failed':
      await inTransaction(deps.db, (trx) => reopen(trx, item, approvalId, c.reason));
      return c.kind === 'failed'
        ? { state: 'failed', itemId: item.id, reason: c.reason, nextStep: refusedNextStep(item, c.reason) }
        : { state: 'refused', itemId: item.id, reason: c.reason };
    case 'done': {
      const now = await findItem(deps.db, item.id);
      return { state: 'resolved', itemId: item.id, resolution: now.resolution ?? '', resolvedBy: now.resolved_by ?? '', rows: [] };
    }
  }
}

/**
 * Completes the run of a remediation that succeeded, audited `run.completed` like every run that
 * completes — service `reconciliation`, outcome `reconciled`, the approver's id hashed as the
 * actor: the conventions of a parked run reconciliation settles
 * (docs/decisions/0755-out-of-band-runs-audit-their-completion.md). The caller holds the run's lock.
 */
async function completeRemediationRun(
  trx: Trx,
  item: WorklistItem,
  action: { workflow_id: string; release_id: string },
  approverHash: string,
): Promise<void> {
  await transitionWorkflow(trx, action.workflow_id, {
    to: 'completed',
    nextStep: `Remediation ${item.remediation} executed for item ${item.id}.`,
    audit: {
      type: 'run.completed',
      service: 'reconciliation',
      actorHash: approverHash,
      outcome: 'reconciled',
      revisions: { release: action.release_id },
    },
  });
}

/**
 * Records a performed remediation's result under its fencing token, in one transaction that
 * locks the remediation's workflow first (lock order workflows → actions → operations): a
 * retryable result resets the operation to pending; a refusal stops the run and reopens the
 * item; a success completes the run (audited `run.completed`), settles the original step ({@link settleOriginal}) and
 * resolves the item, audited as `reconciliation.resolved`. Fenced out → `busy`.
 */
async function recordRemediation(
  trx: Trx,
  deps: ExecuteDeps,
  item: WorklistItem,
  approvalId: string,
  c: Claimed,
  result: CompensationResult,
): Promise<RemediationOutcome> {
  await trx.selectFrom('workflows').select('id').where('id', '=', c.action.workflow_id).forUpdate().execute();
  const fenced = { actionId: c.action.id, key: c.action.operation_key, fencingToken: c.fence };
  const recorded =
    result.status === 'retry'
      ? await resetToPending(trx, { ...fenced, reason: result.reason })
      : await recordOutcome(trx, {
          ...fenced,
          status: result.status,
          result: result.status === 'succeeded' ? { evidenceRef: result.evidenceRef } : null,
          evidenceRef: result.status === 'succeeded' ? result.evidenceRef : null,
          error: result.status === 'succeeded' ? null : result.reason,
        });
  if (!recorded) return { state: 'busy', itemId: item.id }; // fenced out: a newer claim owns the outcome
  if (result.status === 'retry') return { state: 'retry', itemId: item.id, reason: result.reason, waitingFor: { on: 'system_of_record' } };
  const audit = {
    service: 'reconciliation',
    runId: c.action.workflow_id,
    actorHash: actorHash(deps.hmacKey, c.approver),
    tool: c.action.tool,
    actionDigest: c.action.digest,
    actionVersion: c.action.version,
    approvalId,
    operationKeyHash: operationKeyHash(c.action.operation_key),
    revisions: { policy: c.action.policy_revision, release: c.action.release_id },
  };
  const done = result.status === 'succeeded';
  if (done) await completeRemediationRun(trx, item, c.action, audit.actorHash);
  else
    await stopRun(
      trx,
      { id: c.action.workflow_id, release_id: c.action.release_id },
      'denied',
      refusedNextStep(item, result.reason),
      'reconciliation',
    );
  await recordAudit(trx, {
    ...audit,
    type: done ? 'operation.succeeded' : 'operation.failed',
    outcome: done ? 'succeeded' : result.reason.slice(0, 120),
    // The system of record's id of the compensation's effect (a reversal, a cancellation, a replay's refund).
    effectRef: done && !result.evidenceRef.startsWith('lead:') ? result.evidenceRef : null,
  });
  if (!done) {
    await reopen(trx, item, approvalId, result.reason);
    return { state: 'failed', itemId: item.id, reason: result.reason, nextStep: refusedNextStep(item, result.reason) };
  }
  const rows = await settleOriginal(trx, item, result, { actor: c.approver, hmacKey: deps.hmacKey }, c.action.arguments);
  const resolution = `${item.remediation} approved by ${c.approver} (approval ${approvalId})${result.evidenceRef && !result.evidenceRef.startsWith('lead:') ? `: ${result.evidenceRef}` : ''}`;
  await trx
    .updateTable('reconciliation_items')
    .set({ status: 'resolved', resolution, resolved_by: c.approver, resolved_at: new Date() })
    .where('id', '=', item.id)
    .where('status', 'in', ['open', 'frozen'])
    .execute();
  await recordAudit(trx, { ...audit, type: 'reconciliation.resolved', outcome: `${item.class}:${item.remediation}` });
  return { state: 'resolved', itemId: item.id, resolution, resolvedBy: c.approver, rows };
}

/**
 * Executes every remediation whose approval a lead granted and that has not run yet (the
 * repeatable job calls this before each pass). Returns each outcome. With audit storage
 * unavailable each is held as `retry` (`audit_unavailable: …`; nothing claimed or sent, its
 * approval left unused) rather than thrown, so the pass that follows — reads — still runs
 * (docs/product/invariants.md#evidence).
 */
export async function executeApprovedRemediations(deps: ExecuteDeps): Promise<RemediationOutcome[]> {
  const ready = await deps.db
    .selectFrom('reconciliation_items as r')
    .innerJoin('approvals as p', 'p.id', 'r.approval_id')
    .select('r.id')
    .where('r.status', 'in', ['open', 'frozen'])
    .where('p.status', 'in', ['approved', 'used', 'denied', 'expired', 'void'])
    .orderBy('r.created_at')
    .execute();
  const out: RemediationOutcome[] = [];
  for (const r of ready) {
    try {
      out.push(await executeRemediation(deps, r.id));
    } catch (err) {
      if (!(err instanceof AuditUnavailable)) throw err;
      out.push({ state: 'retry', itemId: r.id, reason: `audit_unavailable: ${err.message}`, waitingFor: { on: 'audit' } });
    }
  }
  return out;
}
