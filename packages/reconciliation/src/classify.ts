import type { ReconciliationClass } from '@gatehouse/ledger';
import type { AgentOperation, LedgerRefund, LedgerReversal, Snapshot } from './snapshot.ts';

/** The automatic repair of an in-flight operation whose effect the system of record has. */
export interface ResumeEvidence {
  /** The system of record's id (refund id, shipment id, message id, operation key). */
  evidenceRef: string;
  /** The effect as the tool's output contract describes it (projected before it reaches a model). */
  data: Record<string, unknown>;
}

/**
 * One classified comparison (docs/product/reconciliation.md). `subject` is the natural key of the difference, stable
 * across passes (`op:<key>`, `refund:<refundId>`, `change:<key>`, `order:<id>:surplus<n>`).
 * Amounts are integer cents (the system of record's where it has one).
 */
export interface Finding {
  class: ReconciliationClass;
  subject: string;
  operationKey: string | null;
  workflowId: string | null;
  tenant: string | null;
  tool: string | null;
  orderId: string | null;
  amountCents: number | null;
  ledgerRef: string | null;
  detail: Record<string, unknown>;
  /** Set for `in_flight_ledger_has_it`. */
  resume?: ResumeEvidence;
  /** The operation behind the finding, when there is one (its fencing token guards repairs). */
  operation?: AgentOperation;
}

/** Where an operation stands, judged only from the ledger row (never from the agent's words). */
type Phase = 'done' | 'failed' | 'in_flight' | 'in_progress';

/**
 * `in_flight`: the outcome is unknown (`failed_unknown`) or its lease holder is gone (`running`
 * past the lease). `in_progress`: a live lease or not yet dispatched (`pending`) — the executor
 * owns it and its idempotent key or read-back decides it, so reconciliation leaves it alone.
 */
function phaseOf(op: AgentOperation, nowMs: number): Phase {
  switch (op.status) {
    case 'succeeded':
      return 'done';
    case 'failed':
      return 'failed';
    case 'failed_unknown':
      return 'in_flight';
    case 'running':
      return op.leaseExpiresAtMs !== null && op.leaseExpiresAtMs > nowMs ? 'in_progress' : 'in_flight';
    case 'pending':
      return 'in_progress';
  }
}

function fromOp(op: AgentOperation, cls: ReconciliationClass, extra: Partial<Finding> = {}): Finding {
  return {
    class: cls,
    subject: `op:${op.key}`,
    operationKey: op.key,
    workflowId: op.workflowId,
    tenant: op.tenant,
    tool: op.tool,
    orderId: op.tool === 'schedule_change' ? null : op.target,
    amountCents: typeof op.args.amountCents === 'number' ? op.args.amountCents : null,
    ledgerRef: null,
    detail: {},
    operation: op,
    ...extra,
  };
}

function classifyRefunds(s: Snapshot, ops: AgentOperation[]): Finding[] {
  const out: Finding[] = [];
  const byKey = new Map(s.refunds.map((r) => [r.idempotencyKey, r]));
  const reversalOf = new Map(s.reversals.map((v) => [v.refundId, v]));
  for (const op of ops) {
    const phase = phaseOf(op, s.nowMs);
    if (phase === 'in_progress') continue;
    const refund = byKey.get(op.key);
    const want = Number(op.args.amountCents);
    const ledger = refund ? { ledgerRef: refund.refundId, amountCents: refund.amountCents } : {};
    const amounts = refund ? { agentAmountCents: want, ledgerAmountCents: refund.amountCents } : { agentAmountCents: want };
    const reversal = refund ? reversalOf.get(refund.refundId) : undefined;
    if (phase === 'failed') {
      out.push(
        refund && !reversal
          ? fromOp(op, 'ledger_entry_without_step', {
              ...ledger,
              subject: `refund:${refund.refundId}`,
              detail: { stepStatus: 'failed', ...amounts },
            })
          : fromOp(op, 'matched'),
      );
    } else if (!refund) {
      out.push(fromOp(op, phase === 'done' ? 'agent_done_ledger_missing' : 'in_flight_ledger_lacks_it', { detail: amounts }));
    } else if (reversal) {
      // A compensated step matches its reversed refund; any other reversal left the step without its effect.
      out.push(
        op.actionStatus === 'compensated'
          ? fromOp(op, 'matched', ledger)
          : fromOp(op, phase === 'done' ? 'agent_done_ledger_missing' : 'in_flight_ledger_lacks_it', {
              ...ledger,
              detail: { ...amounts, reversedBy: reversal.reversalId },
            }),
      );
    } else if (refund.amountCents !== want) {
      out.push(fromOp(op, 'amount_mismatch', { ...ledger, detail: amounts }));
    } else if (phase === 'in_flight') {
      out.push(
        fromOp(op, 'in_flight_ledger_has_it', {
          ...ledger,
          resume: {
            evidenceRef: refund.refundId,
            data: { refundId: refund.refundId, orderId: refund.orderId, amountCents: refund.amountCents },
          },
        }),
      );
    } else out.push(fromOp(op, 'matched', ledger));
  }
  return out;
}

/** Refunds the ledger holds under a key no agent operation has (and that were not reversed). */
function refundsWithoutStep(s: Snapshot, opKeys: Set<string>): Finding[] {
  const reversed = new Set(s.reversals.map((v) => v.refundId));
  return s.refunds
    .filter((r) => !opKeys.has(r.idempotencyKey) && !reversed.has(r.refundId))
    .map((r) => ({
      class: 'ledger_entry_without_step' as const,
      subject: `refund:${r.refundId}`,
      operationKey: null,
      workflowId: null,
      tenant: s.orders.get(r.orderId)?.tenant ?? null,
      tool: 'issue_refund',
      orderId: r.orderId,
      amountCents: r.amountCents,
      ledgerRef: r.refundId,
      detail: { idempotencyKey: r.idempotencyKey },
    }));
}

/**
 * Refunds that executed above the auto limit without a `used` approval, selected by their own
 * properties (docs/product/hard-cases.md#units-mistake), never by a time window: for each refund of the
 * ledger, the cumulative amount of its order's refunds up to and including it (R7's basis;
 * refunds reversed before it do not count) exceeds the limit, and its step's action has no used
 * approval. A reversed refund is no longer an effect. Refunds without a step are listed as
 * `ledger_entry_without_step` instead.
 */
function refundsOverLimit(s: Snapshot, opsByKey: Map<string, AgentOperation>): Finding[] {
  const out: Finding[] = [];
  const reversalOf = new Map<string, LedgerReversal>(s.reversals.map((v) => [v.refundId, v]));
  const byOrder = new Map<string, LedgerRefund[]>();
  for (const r of s.refunds) byOrder.set(r.orderId, [...(byOrder.get(r.orderId) ?? []), r]);
  for (const list of byOrder.values()) {
    list.sort((a, b) => a.createdAtMs - b.createdAtMs || a.refundId.localeCompare(b.refundId));
    list.forEach((r, i) => {
      if (reversalOf.has(r.refundId)) return;
      const cumulativeCents = list.slice(0, i + 1).reduce((sum, p) => {
        const rev = reversalOf.get(p.refundId);
        return rev && rev.createdAtMs <= r.createdAtMs ? sum : sum + p.amountCents;
      }, 0);
      const op = opsByKey.get(r.idempotencyKey);
      if (cumulativeCents <= s.autoApproveLimitCents || !op || op.tool !== 'issue_refund' || op.usedApproval) return;
      out.push(
        fromOp(op, 'refund_over_limit_without_approval', {
          subject: `refund:${r.refundId}`,
          amountCents: r.amountCents,
          ledgerRef: r.refundId,
          detail: { cumulativeCents, autoApproveLimitCents: s.autoApproveLimitCents },
        }),
      );
    });
  }
  return out;
}

/**
 * Shipments have no key (docs/product/users-and-tools.md#support-pack, `reship_order`), so the join is by count per order. An in-flight
 * reship is decided by its committed baseline: one shipment more than the baseline (net of the
 * shipments other reships recorded as their effect, and of later reships that succeeded naming
 * none) → the order system has it, unless that shipment is older than the reship's dispatch (ADR
 * 0678); none → it lacks it; anything else, or several in flight on one order, is a count
 * mismatch for a person. Then the standing shipments
 * must equal the reships that happened: the surplus (positive or negative) is the difference.
 */
function classifyShipments(s: Snapshot, ops: AgentOperation[]): Finding[] {
  const out: Finding[] = [];
  for (const [orderId, all] of s.shipments) {
    const mine = ops.filter((o) => o.target === orderId);
    // A reship with a live lease is the executor's: its shipment may already stand.
    if (mine.some((o) => o.status === 'running' && phaseOf(o, s.nowMs) === 'in_progress')) continue;
    const done = mine.filter((o) => o.status === 'succeeded');
    const inFlight = mine.filter((o) => phaseOf(o, s.nowMs) === 'in_flight');
    let hasIt = 0;
    let hasItRef: string | null = null;
    let ambiguous: string[] = [];
    if (inFlight.length === 1) {
      const op = inFlight[0]!;
      // The shipments made since its baseline, less those another reship recorded as its own effect;
      // a later reship that names no listed shipment still accounts for one of them (by count).
      const theirs = new Set(done.map((o) => o.evidenceRef).filter((r): r is string => r !== null));
      const since = op.baselineShipments === null ? [] : all.slice(op.baselineShipments).filter((x) => !theirs.has(x.shipmentId));
      const named = (o: AgentOperation) => o.evidenceRef !== null && all.some((x) => x.shipmentId === o.evidenceRef);
      const later = done.filter((o) => o.createdAtMs > op.createdAtMs && !named(o)).length;
      const extra = op.baselineShipments === null ? NaN : since.length - later;
      const newest = since.filter((x) => !x.cancelled).at(-1);
      // A shipment the order system made before this operation's write-ahead mark is not this
      // call's: someone else shipped (ADR 0678), so the order system lacks this one; one whose time
      // it does not say cannot be shown to be this call's either — a person's call.
      const marked = newest !== undefined && op.dispatchedAtMs !== null;
      const older = marked && newest.createdAtMs < op.dispatchedAtMs!;
      const unreadable = marked && Number.isNaN(newest.createdAtMs);
      if (extra === 1 && newest && !older && !unreadable) {
        hasIt = 1;
        hasItRef = newest.shipmentId;
        out.push(
          fromOp(op, 'in_flight_ledger_has_it', {
            ledgerRef: newest.shipmentId,
            resume: { evidenceRef: newest.shipmentId, data: { orderId, shipmentId: newest.shipmentId, resolvedBy: 'read_back' } },
          }),
        );
      } else if (extra === 0) out.push(fromOp(op, 'in_flight_ledger_lacks_it', { detail: { baseline: op.baselineShipments } }));
      else if (extra === 1 && newest && older && later === 0)
        out.push(
          fromOp(op, 'in_flight_ledger_lacks_it', {
            detail: { baseline: op.baselineShipments, madeBeforeDispatch: newest.shipmentId },
          }),
        );
      else ambiguous = [op.key];
    } else if (inFlight.length > 1) ambiguous = inFlight.map((o) => o.key);
    const standing = all.filter((x) => !x.cancelled);
    const expected = done.length + hasIt;
    const surplus = standing.length - expected;
    if (surplus === 0 && !ambiguous.length) {
      for (const op of done) out.push(fromOp(op, 'matched'));
      continue;
    }
    out.push({
      class: 'shipment_count_mismatch',
      subject: ambiguous.length
        ? `order:${orderId}:in_flight:${ambiguous.join(',')}`
        : `order:${orderId}:surplus${surplus > 0 ? '+' : ''}${surplus}`,
      operationKey: null,
      workflowId: null,
      tenant: s.orders.get(orderId)?.tenant ?? mine[0]?.tenant ?? s.recordTenants.get(orderId) ?? null,
      tool: 'reship_order',
      orderId,
      amountCents: null,
      ledgerRef: standing.at(-1)?.shipmentId ?? null,
      detail: {
        expected,
        standing: standing.length,
        surplus,
        shipmentIds: standing.map((x) => x.shipmentId),
        // Standing shipments no reship names as its effect: what a cancellation should take first.
        unclaimedShipmentIds: standing.map((x) => x.shipmentId).filter((id) => id !== hasItRef && !mine.some((o) => o.evidenceRef === id)),
        cancelled: all.filter((x) => x.cancelled).length,
        ...(ambiguous.length ? { undecidedOperations: ambiguous } : {}),
      },
    });
  }
  return out;
}

/**
 * Mail has no key and no dedupe: messages of a template beyond the sends that succeeded decide
 * in-flight sends, oldest first. A message a succeeded send recorded as its own (its evidence) is
 * that send's; only sends that name no listed message are assumed to have sent the oldest ones.
 */
function classifyMail(s: Snapshot, ops: AgentOperation[]): Finding[] {
  const out: Finding[] = [];
  for (const op of ops.filter((o) => phaseOf(o, s.nowMs) === 'in_flight')) {
    const template = String(op.args.template);
    const listed = (s.messages.get(op.target) ?? []).filter((m) => m.template === template);
    const same = ops.filter((o) => o.target === op.target && String(o.args.template) === template);
    const succeeded = same.filter((o) => o.status === 'succeeded');
    const theirs = new Set(succeeded.map((o) => o.evidenceRef).filter((r): r is string => r !== null));
    const msgs = listed.filter((m) => !theirs.has(m.messageId));
    const done = succeeded.filter((o) => !(o.evidenceRef !== null && listed.some((m) => m.messageId === o.evidenceRef))).length;
    const before = same.filter((o) => phaseOf(o, s.nowMs) === 'in_flight' && o.createdAtMs < op.createdAtMs).length;
    const msg = msgs[done + before];
    out.push(
      msg
        ? fromOp(op, 'in_flight_ledger_has_it', {
            ledgerRef: msg.messageId,
            resume: { evidenceRef: msg.messageId, data: { messageId: msg.messageId, template } },
          })
        : fromOp(op, 'in_flight_ledger_lacks_it'),
    );
  }
  return out;
}

/**
 * Messages no step explains (ADR 0791): of each read order's messages, per template, those that no
 * send names as its effect and no in-flight send was found to have made (`claimed`), less one for
 * each succeeded send that names no listed message (those are assumed to have sent the oldest, as
 * {@link classifyMail} assumes): the rest, newest, are `ledger_entry_without_step`, one per
 * message. An order with a send the executor still owns (live lease, `pending`) is left to the
 * next pass, and so is a message sent after the snapshot began (its step may be younger than the
 * operations read).
 */
function messagesWithoutStep(s: Snapshot, ops: AgentOperation[], claimed: Set<string>): Finding[] {
  const out: Finding[] = [];
  for (const [orderId, listed] of s.messages) {
    const mine = ops.filter((o) => o.target === orderId);
    if (mine.some((o) => phaseOf(o, s.nowMs) === 'in_progress')) continue;
    const named = new Set(mine.map((o) => o.evidenceRef).filter((r): r is string => r !== null));
    for (const template of new Set(listed.map((m) => m.template))) {
      const unnamed = listed.filter(
        (m) => m.template === template && !named.has(m.messageId) && !claimed.has(m.messageId) && !(m.createdAtMs >= s.nowMs),
      );
      const stepsNamingNone = mine.filter(
        (o) =>
          o.status === 'succeeded' &&
          String(o.args.template) === template &&
          !(o.evidenceRef !== null && listed.some((m) => m.messageId === o.evidenceRef)),
      ).length;
      for (const m of unnamed.slice(stepsNamingNone))
        out.push({
          class: 'ledger_entry_without_step',
          subject: `message:${m.messageId}`,
          operationKey: null,
          workflowId: null,
          tenant: s.orders.get(orderId)?.tenant ?? s.recordTenants.get(orderId) ?? null,
          tool: 'notify_customer',
          orderId,
          amountCents: null,
          ledgerRef: m.messageId,
          detail: { template, sentAt: Number.isNaN(m.createdAtMs) ? null : new Date(m.createdAtMs).toISOString() },
        });
    }
  }
  return out;
}

function classifyChanges(s: Snapshot, ops: AgentOperation[], opKeys: Set<string>): Finding[] {
  const out: Finding[] = [];
  const byKey = new Map(s.changeOperations.map((c) => [c.operationKey, c]));
  for (const op of ops) {
    const phase = phaseOf(op, s.nowMs);
    if (phase === 'in_progress') continue;
    const c = byKey.get(op.key);
    const ledger = c ? { ledgerRef: c.operationKey } : {};
    if (phase === 'failed')
      out.push(
        c
          ? fromOp(op, 'ledger_entry_without_step', { ...ledger, subject: `change:${c.operationKey}`, detail: { stepStatus: 'failed' } })
          : fromOp(op, 'matched'),
      );
    else if (!c) out.push(fromOp(op, phase === 'done' ? 'agent_done_ledger_missing' : 'in_flight_ledger_lacks_it'));
    else if (phase === 'in_flight')
      out.push(
        fromOp(op, 'in_flight_ledger_has_it', {
          ...ledger,
          resume: {
            evidenceRef: c.operationKey,
            data: { operationKey: c.operationKey, status: c.status, planId: c.planId, changeId: c.changeId, window: c.window },
          },
        }),
      );
    else out.push(fromOp(op, 'matched', ledger));
  }
  for (const c of s.changeOperations) {
    if (opKeys.has(c.operationKey)) continue;
    out.push({
      class: 'ledger_entry_without_step',
      subject: `change:${c.operationKey}`,
      operationKey: null,
      workflowId: null,
      tenant: c.tenant,
      tool: 'schedule_change',
      orderId: null,
      amountCents: null,
      ledgerRef: c.operationKey,
      detail: { changeId: c.changeId },
    });
  }
  return out;
}

/**
 * Classifies every comparison of one snapshot into the classes of docs/product/reconciliation.md, from the records only
 * (the agent's own status is one input, the system of record the other; neither is trusted to
 * explain the other). Joins by idempotency key (refunds, change operations), by count against
 * the committed baseline (shipments) and by template (mail); a message no send explains is
 * `ledger_entry_without_step` (ADR 0791). Pure and deterministic: the same
 * snapshot gives the same findings in the same order. `matched` findings are included.
 */
export function classify(s: Snapshot): Finding[] {
  const opsByKey = new Map(s.operations.map((o) => [o.key, o]));
  const opKeys = new Set(opsByKey.keys());
  const of = (tool: string) => s.operations.filter((o) => o.tool === tool);
  const mail = classifyMail(s, of('notify_customer'));
  const claimed = new Set(mail.filter((f) => f.class === 'in_flight_ledger_has_it').map((f) => f.ledgerRef!));
  return [
    ...classifyRefunds(s, of('issue_refund')),
    ...refundsWithoutStep(s, opKeys),
    ...refundsOverLimit(s, opsByKey),
    ...classifyShipments(s, of('reship_order')),
    ...mail,
    ...messagesWithoutStep(s, of('notify_customer'), claimed),
    ...classifyChanges(s, of('schedule_change'), opKeys),
  ];
}
