import { randomUUID } from 'node:crypto';
import { isUuid, loadWorld, REMEDIATION_RULE_ID, Refused } from '@gatehouse/contracts';
import { fetchOrder, MalformedRecord, RecordRefused } from '@gatehouse/policy';
import {
  insertOutOfBandRun,
  actorHash,
  DependencyUnavailable,
  inTransaction,
  operationKeyHash,
  recordAudit,
  transitionAction,
  stopRun,
  type Db,
  type Remediation,
  type Trx,
} from '@gatehouse/ledger';
import { referenceChangeBundle, referenceSupportBundle } from './bundles.ts';
import { catalogDigest, digestOf, MAX_AMOUNT_CENTS, toolsOfPack } from '@gatehouse/tools';
import { REMEDIATION_TOOL, remediationsOf } from './classes.ts';
import type { WorklistItem } from './worklist.ts';

/** A remediation cannot be requested or executed as asked (bad item, class or state). */
export class RemediationRefused extends Refused {
  constructor(reason: string, message: string) {
    super(reason, message);
  }
}

/** Settings shared by requesting and executing remediations. */
export interface RemediationDeps {
  db: Db;
  stagingUrl: string;
  hmacKey: string;
  /** Release id recorded on the remediation's workflow, action and approval. */
  release: string;
  supportRevision?: string;
  changeRevision?: string;
  policyDir?: string;
}

/** The approval a lead must decide, as the requester sees it. Amount in integer cents. */
export interface RemediationTicket {
  itemId: string;
  remediation: Remediation;
  approvalId: string;
  workflowId: string;
  actionVersion: number;
  actionDigest: string;
  /** The compensation's idempotency key: `recon_<itemId>` (`.v<n>` after a denied or expired request). */
  operationKey: string;
  tenant: string;
  region: string | null;
  approverRole: string;
  amountCents: number | null;
  expiresAt: Date;
  /** True when an identical request was already pending (nothing new was written). */
  existing: boolean;
}

/**
 * Finds a worklist item by its id or a unique id prefix (≥ 8 hex characters).
 * @throws RemediationRefused(`unknown_item` | `ambiguous_item`).
 */
export async function findItem(db: Db, given: string): Promise<WorklistItem> {
  // Ids are stored lower-case; a prefix copied in upper case names the same item the whole id does.
  const idOrPrefix = given.toLowerCase();
  const rows = isUuid(idOrPrefix)
    ? await db.selectFrom('reconciliation_items').selectAll().where('id', '=', idOrPrefix).execute()
    : /^[0-9a-f-]{8,35}$/.test(idOrPrefix)
      ? await db
          .selectFrom('reconciliation_items')
          .selectAll()
          .where((eb) => eb(eb.cast('id', 'text'), 'like', `${idOrPrefix}%`))
          .limit(2)
          .execute()
      : [];
  if (rows.length > 1) throw new RemediationRefused('ambiguous_item', `item prefix ${idOrPrefix} names more than one item`);
  if (!rows[0]) throw new RemediationRefused('unknown_item', `no reconciliation item ${idOrPrefix}`);
  return rows[0];
}

/**
 * The order the remediation is about, read as a decision reads it (`fetchOrder`: validated, text
 * bounded, ADR 0640), or null when the order system has no such order.
 * @throws RemediationRefused(`order_system_refused`) when the order system refuses the read (a
 *   4xx: it understood and rejected it), with its status and reason and the next step — asking
 *   again the same way gets the same answer, so it is not an outage (docs/decisions/0050).
 * @throws MalformedRecord when it answers something that is not an order; DependencyUnavailable
 *   (`system_of_record`) when it does not answer, or answers 408, 429 or 5xx — never "no such order".
 */
async function orderRecord(
  stagingUrl: string,
  item: Pick<WorklistItem, 'id'>,
  orderId: string,
): Promise<{ tenant: string; region: string; paid: number } | null> {
  try {
    return await fetchOrder(stagingUrl, orderId);
  } catch (err) {
    if (err instanceof RecordRefused) {
      throw new RemediationRefused(
        'order_system_refused',
        `the order system refused to read the order of item ${item.id} (${err.status}${err.refusal ? ` ${err.refusal}` : ''}): ` +
          'nothing was requested, and asking again gets the same answer; ' +
          `check the item's order with the order system's owner and repair it by hand, or ask again once the order system accepts it`,
      );
    }
    if (err instanceof MalformedRecord || err instanceof DependencyUnavailable) throw err;
    throw new DependencyUnavailable('system_of_record', `order system: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * The exact compensation a lead is asked to approve: its arguments come from the worklist item
 * (the systems of record's ids and amounts), never from a model.
 */
function remediationArgs(
  item: WorklistItem,
  remediation: Remediation,
  outcomes: Record<string, string | null> | null,
): Record<string, unknown> {
  const detail = item.detail;
  const shipmentIds = Array.isArray(detail.shipmentIds) ? (detail.shipmentIds as string[]) : [];
  // The newest standing shipment no reship recorded as its effect; the newest standing one otherwise.
  const unclaimed = Array.isArray(detail.unclaimedShipmentIds) ? (detail.unclaimedShipmentIds as string[]) : [];
  return {
    itemId: item.id,
    class: item.class,
    remediation,
    subject: item.subject,
    orderId: item.order_id,
    operationKey: item.operation_key,
    ledgerRef: item.ledger_ref,
    amountCents: item.amount_cents === null ? null : Number(item.amount_cents),
    ...(remediation === 'cancel_shipment' ? { shipmentId: unclaimed.at(-1) ?? shipmentIds.at(-1) ?? null } : {}),
    ...(outcomes ? { outcomes } : {}),
  };
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/**
 * What a remediation of an item naming undecided reships (`detail.undecidedOperations`, a
 * `shipment_count_mismatch` the count could not decide) must say (docs/decisions/0691): a `ratify`
 * names the outcome of each of those operations — a standing shipment no other reship claims
 * (`detail.unclaimedShipmentIds`), or null for none — each shipment at most once; it then settles
 * them and their runs. A `cancel_shipment` waits until they are decided (the ratification first).
 * Returns the outcomes in key order (bound into the approval's digest), or null for an item
 * without undecided operations.
 * @throws RemediationRefused(`undecided_operations`) when they are missing, incomplete, name
 *   another operation or a shipment that is not a candidate, or one shipment twice; or for a
 *   cancellation; (`outcomes_not_expected`) when outcomes are given for any other item.
 */
export function undecidedOutcomes(
  item: Pick<WorklistItem, 'id' | 'detail'>,
  remediation: Remediation,
  given: Readonly<Record<string, string | null>> | undefined,
): Record<string, string | null> | null {
  const undecided = strings(item.detail.undecidedOperations).sort();
  if (!undecided.length) {
    if (given && Object.keys(given).length)
      throw new RemediationRefused('outcomes_not_expected', `item ${item.id} names no undecided operation; give no outcomes`);
    return null;
  }
  const candidates = strings(item.detail.unclaimedShipmentIds);
  const how = `name each with --outcome <operationKey>=<shipmentId|none> (operations: ${undecided.join(', ')}; standing shipments no reship claims: ${candidates.join(', ') || 'none'})`;
  if (remediation === 'cancel_shipment')
    throw new RemediationRefused('undecided_operations', `item ${item.id} has undecided reships: ratify their outcomes first; ${how}`);
  if (remediation !== 'ratify') return null;
  const keys = Object.keys(given ?? {}).sort();
  const named = keys.map((k) => given![k] ?? null).filter((v): v is string => v !== null);
  const ok =
    keys.join('\n') === undecided.join('\n') && named.every((id) => candidates.includes(id)) && new Set(named).size === named.length;
  if (!ok)
    throw new RemediationRefused('undecided_operations', `item ${item.id}: a ratification must decide its undecided reships; ${how}`);
  return Object.fromEntries(keys.map((k) => [k, given![k] ?? null]));
}

/**
 * Records a remediation of a live worklist item as an approval request a lead decides through
 * the approval API (`POST /v1/approvals/:id/decision`, docs/product/public-contract.md#approvals): a workflow of its own (ticket
 * `recon_<itemId>`), one compensation action (`reverse_refund`, `cancel_shipment`,
 * `replay_refund`, `adopt_ledger_entry` or `ratify_difference` — never in the agent's catalog)
 * whose digest binds the exact arguments, and a pending approval with rule `RECON` for the role
 * of the item's pack (support: a lead of the order's region whose limit covers the amount;
 * change: a change owner). The requester (the operator) can never approve it. Audited
 * (`approval.requested`, `compensation.requested`). Asking again for the same remediation while
 * it is pending returns the pending request; asking for another voids the pending one first. An
 * item naming undecided reships is ratified only with `outcomes` for each ({@link undecidedOutcomes}).
 * @throws RemediationRefused when the item is not live, the remediation does not fit its class,
 *   undecided reships are not decided ({@link undecidedOutcomes}),
 *   an approved remediation awaits execution, the item's tenant or order is unknown, or the order
 *   system refuses to read the order (`order_system_refused`), or the amount at stake is above the
 *   largest amount an approval holds (`amount_too_large`, ADR 0689).
 */
export async function requestRemediation(deps: RemediationDeps, req: RemediationRequest): Promise<RemediationTicket> {
  const item = await findItem(deps.db, req.itemId);
  const outcomes = refuseUnfitRemediation(item, req);
  const pending = item.approval_id ? await pendingRequestOf(deps.db, item, item.approval_id, req, outcomes) : null;
  if (pending) return pending;
  const scope = await remediationScope(deps, item);
  const args = remediationArgs(item, req.remediation, outcomes);
  const now = new Date();
  const expiresAt = new Date(now.getTime() + scope.bundle.approval.ttlSeconds * 1000);

  return inTransaction(deps.db, async (trx) => {
    const live = await trx.selectFrom('reconciliation_items').selectAll().where('id', '=', item.id).forUpdate().executeTakeFirstOrThrow();
    if (live.approval_id !== item.approval_id || (live.status !== 'open' && live.status !== 'frozen')) {
      throw new RemediationRefused('item_changed', `item ${item.id} changed meanwhile; look again`);
    }
    if (live.approval_id) await voidReplacedRemediation(trx, deps, live.approval_id, req, now);
    const ticket = await insertRemediationRequest(trx, deps, { item, req, scope, args, expiresAt });
    // The item keeps the order's tenant the order system named: its money counts in that tenant's day (ADR 0686).
    await trx
      .updateTable('reconciliation_items')
      .set({ remediation: req.remediation, approval_id: ticket.approvalId, tenant: live.tenant ?? scope.tenant })
      .where('id', '=', item.id)
      .execute();
    return ticket;
  });
}

/** What an operator asks of {@link requestRemediation}: the item, the remediation, who asks, and the undecided reships' outcomes. */
export type RemediationRequest = {
  itemId: string;
  remediation: Remediation;
  operator: string;
  outcomes?: Readonly<Record<string, string | null>>;
};

/**
 * The checks of a request against its item alone: the item is live, the remediation fits its
 * class and tool, undecided reships are decided ({@link undecidedOutcomes}), a cancellation has a
 * surplus shipment to cancel, and a replay's key does not hold a reversed refund (a replay under it
 * could only return that refund, move no money and still resolve the item, ADR 0050).
 * Returns the decided outcomes (null when the remediation takes none).
 * @throws RemediationRefused `item_not_live`, `remediation_not_allowed`, `nothing_to_cancel`,
 *   `refund_reversed`, or {@link undecidedOutcomes}' refusal.
 */
function refuseUnfitRemediation(item: WorklistItem, req: RemediationRequest): ReturnType<typeof undecidedOutcomes> {
  if (item.status !== 'open' && item.status !== 'frozen')
    throw new RemediationRefused('item_not_live', `item ${item.id} is ${item.status}`);
  const allowed = remediationsOf(item.class, item.tool);
  if (!allowed.includes(req.remediation)) {
    throw new RemediationRefused(
      'remediation_not_allowed',
      `${req.remediation} does not fit ${item.class}${allowed.length ? ` (allowed: ${allowed.join(', ')})` : ' (repaired automatically)'}`,
    );
  }
  const outcomes = undecidedOutcomes(item, req.remediation, req.outcomes);
  if (req.remediation === 'cancel_shipment' && !(Number(item.detail.surplus) > 0)) {
    throw new RemediationRefused('nothing_to_cancel', `order ${item.order_id} has no surplus shipment`);
  }
  if (req.remediation === 'replay' && typeof item.detail.reversedBy === 'string') {
    throw new RemediationRefused(
      'refund_reversed',
      `the ledger's refund ${item.ledger_ref} under this step's key was reversed (${item.detail.reversedBy}): a replay under that key only returns it; ratify the difference instead`,
    );
  }
  return outcomes;
}

/**
 * The item's earlier request (`approvalId`): the same remediation with the same outcomes still
 * pending is returned as the ticket (`existing`, nothing written); any other pending, denied or
 * expired request returns null (the new request replaces it).
 * @throws RemediationRefused `remediation_approved` when an approved remediation awaits execution.
 */
async function pendingRequestOf(
  db: Db,
  item: WorklistItem,
  approvalId: string,
  req: RemediationRequest,
  outcomes: ReturnType<typeof undecidedOutcomes>,
): Promise<RemediationTicket | null> {
  const prior = await db
    .selectFrom('approvals as p')
    .innerJoin('actions as a', 'a.id', 'p.action_id')
    .select(['p.id', 'p.status', 'p.workflow_id', 'p.action_version', 'p.action_digest', 'a.operation_key', 'p.tenant', 'p.region'])
    .select(['p.approver_role', 'p.amount_cents', 'p.expires_at', 'a.arguments'])
    .where('p.id', '=', approvalId)
    .executeTakeFirstOrThrow();
  const sameOutcomes = JSON.stringify(prior.arguments.outcomes ?? null) === JSON.stringify(outcomes);
  if (prior.status === 'pending' && item.remediation === req.remediation && sameOutcomes) {
    return {
      itemId: item.id,
      remediation: req.remediation,
      approvalId: prior.id,
      workflowId: prior.workflow_id,
      actionVersion: prior.action_version,
      actionDigest: prior.action_digest,
      operationKey: prior.operation_key,
      tenant: prior.tenant,
      region: prior.region,
      approverRole: prior.approver_role,
      amountCents: prior.amount_cents,
      expiresAt: new Date(prior.expires_at),
      existing: true,
    };
  }
  if (prior.status === 'approved' || prior.status === 'used') {
    throw new RemediationRefused(
      'remediation_approved',
      `item ${item.id} has an approved ${item.remediation} awaiting execution: run it with gatehouse reconcile resolve ${item.id}`,
    );
  }
  return null;
}

/** Who may approve a remediation and over what: its pack's bundle, the order as the order system has it, the tenant and the amount at stake (cents). */
type RemediationScope = {
  support: boolean;
  bundle: ReturnType<typeof referenceSupportBundle> | ReturnType<typeof referenceChangeBundle>;
  order: Awaited<ReturnType<typeof orderRecord>> | null;
  tenant: string;
  amountCents: number | null;
};

/**
 * The scope of a remediation of `item`: the reference bundle of its pack (support, or change for
 * `schedule_change`), the order read from the order system, the tenant (the order's, else the
 * item's), and the value at risk a lead's limit must cover: the money moved, or a replacement's
 * worth (decision 0008).
 * @throws RemediationRefused `unknown_tenant`, `unknown_order`, `amount_too_large` (above the
 *   largest amount an approval holds, ADR 0689), or {@link orderRecord}'s refusals.
 */
async function remediationScope(deps: RemediationDeps, item: WorklistItem): Promise<RemediationScope> {
  const support = item.tool !== 'schedule_change';
  const bundle = support
    ? referenceSupportBundle(deps.supportRevision, deps.policyDir)
    : referenceChangeBundle(deps.changeRevision, deps.policyDir);
  const order = item.order_id ? await orderRecord(deps.stagingUrl, item, item.order_id) : null;
  const tenant = order?.tenant ?? item.tenant;
  if (!tenant) throw new RemediationRefused('unknown_tenant', `item ${item.id} names no tenant or order`);
  if (support && !order) throw new RemediationRefused('unknown_order', `the order system has no order ${item.order_id}`);
  const amountCents = !support ? null : item.amount_cents !== null ? Number(item.amount_cents) : (order?.paid ?? null);
  // A larger amount found in a system of record is for people.
  if (amountCents !== null && amountCents > MAX_AMOUNT_CENTS) {
    throw new RemediationRefused(
      'amount_too_large',
      `item ${item.id} is about ${amountCents} cents, above the largest amount an approval holds (${MAX_AMOUNT_CENTS} cents): ` +
        "nothing was requested; repair it by hand with the system of record's owner",
    );
  }
  return { support, bundle, order, tenant, amountCents };
}

/**
 * Voids the item's pending (or denied, expired) request `approvalId` that a new one replaces,
 * exactly as an amendment does: the approval `void`, its action `superseded`, its run stopped
 * `denied` if it still awaits approval, audited `approval.voided`. An approved or used one is
 * left alone ({@link pendingRequestOf} refused it before).
 */
async function voidReplacedRemediation(
  trx: Trx,
  deps: RemediationDeps,
  approvalId: string,
  req: RemediationRequest,
  now: Date,
): Promise<void> {
  const voided = await trx
    .updateTable('approvals')
    .set({ status: 'void', decided_at: now, reason: `replaced by ${req.remediation}` })
    .where('id', '=', approvalId)
    .where('status', 'in', ['pending', 'denied', 'expired'])
    .returning(['id', 'action_id', 'workflow_id', 'tool', 'status'])
    .executeTakeFirst();
  if (!voided) return;
  await transitionAction(trx, voided.action_id, { to: 'superseded' });
  await stopRun(trx, { id: voided.workflow_id }, 'denied', `Replaced by a ${req.remediation} request.`, 'reconciliation', {
    onlyFrom: ['awaiting_approval'],
  });
  await recordAudit(trx, {
    type: 'approval.voided',
    service: 'reconciliation',
    runId: voided.workflow_id,
    actorHash: actorHash(deps.hmacKey, req.operator),
    tool: voided.tool,
    approvalId: voided.id,
    outcome: 'replaced',
  });
}

/**
 * The compensation's idempotency key for the next request of `itemId` in `tenant`:
 * `recon_<itemId>`, then `recon_<itemId>.v<n>` after a denied or expired request.
 */
async function nextRemediationKey(trx: Trx, tenant: string, itemId: string): Promise<string> {
  const r = await trx
    .selectFrom('workflows')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('tenant', '=', tenant)
    .where('ticket_id', 'like', `recon_${itemId}%`)
    .executeTakeFirstOrThrow();
  const attempt = Number(r.n) + 1;
  return attempt === 1 ? `recon_${itemId}` : `recon_${itemId}.v${attempt}`;
}

/**
 * Writes a new remediation request in `trx`: its out-of-band run, its one compensation action
 * (digest over the exact arguments), its pending `RECON` approval for the pack's approver role,
 * audited `approval.requested` and `compensation.requested`. Returns the ticket (`existing` false).
 */
async function insertRemediationRequest(
  trx: Trx,
  deps: RemediationDeps,
  r: { item: WorklistItem; req: RemediationRequest; scope: RemediationScope; args: Record<string, unknown>; expiresAt: Date },
): Promise<RemediationTicket> {
  const { item, req, args, expiresAt } = r;
  const { bundle, order, tenant, amountCents } = r.scope;
  const tool = REMEDIATION_TOOL[req.remediation];
  const target = item.order_id ?? item.ledger_ref ?? item.id;
  const pack = r.scope.support ? 'support' : 'change';
  const operationKey = await nextRemediationKey(trx, tenant, item.id);
  const [workflowId, proposalId, actionId, approvalId] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
  const digest = digestOf({ tool, target, arguments: args, actor: req.operator, tenant, policyRevision: bundle.revision, version: 1 });
  const region = bundle.approval.sameRegion ? (order?.region ?? null) : null;
  const run = {
    workflowId,
    proposalId,
    key: operationKey,
    tenant,
    operator: req.operator,
    pack,
    tool,
    args,
    nextStep: `A ${bundle.approval.approverRole} must approve ${tool} for reconciliation item ${item.id}.`,
    release: deps.release,
    policyRevision: bundle.revision,
    catalogDigest: catalogDigest(toolsOfPack(pack)),
  } as const;
  await insertOutOfBandRun(trx, run, {
    actionId,
    approvalId,
    target,
    digest,
    ruleId: REMEDIATION_RULE_ID,
    facts: {
      reconciliation: { itemId: item.id, class: item.class, owner: item.owner, subject: item.subject, detail: item.detail },
      ...(order ? { order: { id: item.order_id, tenant: order.tenant, region: order.region, paidCents: order.paid } } : {}),
    },
    region,
    amountCents,
    approverRole: bundle.approval.approverRole,
    sameRegion: bundle.approval.sameRegion,
    expiresAt,
  });
  const audit = {
    service: 'reconciliation',
    runId: workflowId,
    actorHash: actorHash(deps.hmacKey, req.operator),
    tool,
    actionDigest: digest,
    actionVersion: 1,
    approvalId,
    operationKeyHash: operationKeyHash(operationKey),
    ruleId: REMEDIATION_RULE_ID,
    revisions: { policy: bundle.revision, release: deps.release },
  };
  await recordAudit(trx, { ...audit, type: 'approval.requested', decision: 'REQUIRE_APPROVAL' });
  await recordAudit(trx, { ...audit, type: 'compensation.requested', outcome: `${item.class}:${req.remediation}` });
  return {
    itemId: item.id,
    remediation: req.remediation,
    approvalId,
    workflowId,
    actionVersion: 1,
    actionDigest: digest,
    operationKey,
    tenant,
    region,
    approverRole: bundle.approval.approverRole,
    amountCents,
    expiresAt,
    existing: false,
  };
}

/** The approving lead's delegation bound (their approve limit, cents), from world.json. */
export function approverCeilingCents(approverId: string, tenant: string): number {
  return loadWorld().users.find((u) => u.id === approverId && u.tenant === tenant)?.approveLimit ?? 0;
}
