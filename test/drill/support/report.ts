import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { PaymentsRecord, RefundOp } from './measure.ts';

/**
 * One row of the drill's report: what the refunds decided under one policy revision did.
 * Format: docs/runbooks/incident-drill.md. Money in integer cents.
 */
export interface RevisionRow {
  revision: string;
  /** Refunds the payments ledger paid (operations `succeeded`). */
  refundsPaid: number;
  centsPaid: number;
  /** Paid refunds above the auto limit (cumulative on the order) without a used approval. */
  overLimitWithoutApproval: number;
  /** Refunds the payments ledger refused with `ceiling_exceeded` (the delegated token's ceiling). */
  blockedByCeiling: number;
  /** The over-limit refunds' amounts: what a lead must reverse or ratify. */
  centsToRecover: number;
  /** Refund proposals the policy denied, by rule id. */
  deniedByRule: Record<string, number>;
}

/** The timings of the incident, in simulated seconds of the drill (null: it never happened). */
export interface IncidentTimes {
  forcedAt: number | null;
  firstViolationAt: number | null;
  alertAt: number | null;
  containedAt: number | null;
  restoredAt: number | null;
  secondsToAlert: number | null;
  secondsToContainment: number | null;
}

/** What reconciliation found and the leads did about it. */
export interface ReconciliationOutcome {
  /** Items of class `refund_over_limit_without_approval`: operation keys, sorted. */
  selected: string[];
  /** Whether `selected` equals the run's violations by their own properties. */
  selectedExactly: boolean;
  ratified: number;
  reversed: number;
  centsReversed: number;
  unexplainedBefore: number;
  unexplainedAfter: number;
}

/** The whole report of one drill run (printed, and written as JSON). */
export interface DrillReport {
  tag: string;
  seed: number;
  tickets: number;
  secondsBetweenTickets: number;
  simulatedSeconds: number;
  realSeconds: number;
  rows: RevisionRow[];
  times: IncidentTimes;
  /** Refund effects dispatched after containment and before the tool was switched on again. */
  effectsAfterContainment: number;
  /** Violations dispatched after containment (never contained: after two monitor passes past the first violation). */
  lateViolations: number;
  /** Monitors that fired before the units mistake was forced (false alarms). */
  alertsBeforeMistake: string[];
  reconciliation: ReconciliationOutcome;
  /** Differences between the rows and the payments ledger's own records (empty: they agree). */
  paymentsDisagreements: string[];
  workflowStates: Record<string, number>;
  auditIntact: boolean;
  timeline: string[];
  /** The drill's failed checks (empty: the drill passes). */
  verdict: string[];
  /** On a failed verdict: each ticket that arrived under the mistake, its run and refunds (ticketFates). */
  fatesUnderMistake?: string[];
}

/** The rows per revision from the ledger's refund operations and denials, in order of first use. */
export function revisionRows(ops: RefundOp[], denied: Record<string, Record<string, number>>): RevisionRow[] {
  const revisions = [...new Set([...ops.map((o) => o.policyRevision), ...Object.keys(denied)])];
  return revisions.map((revision) => {
    const mine = ops.filter((o) => o.policyRevision === revision);
    const paid = mine.filter((o) => o.status === 'succeeded');
    const over = paid.filter((o) => o.violation);
    return {
      revision,
      refundsPaid: paid.length,
      centsPaid: sum(paid.map((o) => o.amountCents)),
      overLimitWithoutApproval: over.length,
      blockedByCeiling: mine.filter((o) => o.status === 'failed' && /ceiling_exceeded/.test(o.error ?? '')).length,
      centsToRecover: sum(over.map((o) => o.amountCents)),
      deniedByRule: denied[revision] ?? {},
    };
  });
}

/**
 * The same rows recomputed from the payments ledger's own records (paid refunds and ceiling
 * refusals by idempotency key = operation key); returns every difference.
 */
export function disagreements(rows: RevisionRow[], ops: RefundOp[], payments: PaymentsRecord): string[] {
  const out: string[] = [];
  for (const row of rows) {
    const mine = ops.filter((o) => o.policyRevision === row.revision);
    const paid = mine.filter((o) => payments.refunds.has(o.key));
    const centsPaid = sum(paid.map((o) => payments.refunds.get(o.key)!));
    const refused = mine.filter((o) => payments.ceilingRefused.has(o.key)).length;
    if (paid.length !== row.refundsPaid) out.push(`${row.revision}: ledger paid ${paid.length}, Gatehouse recorded ${row.refundsPaid}`);
    if (centsPaid !== row.centsPaid)
      out.push(`${row.revision}: ledger paid ${dollars(centsPaid)}, Gatehouse recorded ${dollars(row.centsPaid)}`);
    if (refused !== row.blockedByCeiling)
      out.push(`${row.revision}: ledger refused ${refused} over the ceiling, Gatehouse recorded ${row.blockedByCeiling}`);
  }
  return out;
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

/** Integer cents as dollars with two decimals. */
export const dollars = (cents: number): string => (cents / 100).toFixed(2);

/** The report's table and incident lines, as printed (docs/runbooks/incident-drill.md). */
export function formatReport(r: DrillReport): string {
  const head = [
    'policy revision',
    'refunds paid',
    'dollars paid',
    'over limit, no approval',
    'blocked by ceiling',
    'dollars to recover',
    'denied (rule: n)',
  ];
  const body = r.rows.map((x) => [
    x.revision,
    String(x.refundsPaid),
    dollars(x.centsPaid),
    String(x.overLimitWithoutApproval),
    String(x.blockedByCeiling),
    dollars(x.centsToRecover),
    Object.entries(x.deniedByRule)
      .map(([k, n]) => `${k}: ${n}`)
      .join(', ') || '-',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]): string =>
    `| ${cells.map((c, i) => (i === 0 || i === 6 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  const t = r.times;
  const s = (v: number | null): string => (v === null ? 'never' : `${v.toFixed(1)} s`);
  return [
    `incident drill ${r.tag} (seed ${r.seed}): ${r.tickets} tickets, one per ${r.secondsBetweenTickets} s, ${s(r.simulatedSeconds)} simulated in ${s(r.realSeconds)} real`,
    line(head),
    `|${widths.map((w, i) => (i === 0 || i === 6 ? ` ${'-'.repeat(w)} ` : ` ${'-'.repeat(w - 1)}: `)).join('|')}|`,
    ...body.map(line),
    `first violation → alert: ${s(t.secondsToAlert)}; → containment: ${s(t.secondsToContainment)} (simulated; forced at ${s(t.forcedAt)}, first violation at ${s(t.firstViolationAt)}, alert at ${s(t.alertAt)}, contained at ${s(t.containedAt)}, restored at ${s(t.restoredAt)})`,
    `effects after containment: ${r.effectsAfterContainment}; violations after containment: ${r.lateViolations}; alerts before the mistake: ${r.alertsBeforeMistake.length}`,
    `reconciliation: ${r.reconciliation.selected.length} refund(s) over the limit without approval selected (exactly the violations: ${r.reconciliation.selectedExactly}); ${r.reconciliation.ratified} ratified, ${r.reconciliation.reversed} reversed (${dollars(r.reconciliation.centsReversed)} recovered); unexplained differences ${r.reconciliation.unexplainedBefore} → ${r.reconciliation.unexplainedAfter}`,
    `payments ledger agrees: ${r.paymentsDisagreements.length === 0 ? 'yes' : r.paymentsDisagreements.join('; ')}; audit chain intact: ${r.auditIntact}`,
    `workflows: ${JSON.stringify(r.workflowStates)}`,
    `verdict: ${r.verdict.length === 0 ? 'pass' : r.verdict.join('; ')}`,
    ...(r.fatesUnderMistake ? ['tickets under the mistake:', ...r.fatesUnderMistake] : []),
  ].join('\n');
}

/** Writes the report as JSON to `path` (test-results/drill-report.json for the full drill). */
export function writeReport(path: string, report: DrillReport): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(report, null, 2)}\n`);
}
