import type { ReconciliationClass, Remediation } from '@gatehouse/ledger';

/** The eight reconciliation classes of docs/product/reconciliation.md, in the order reports list them. */
export const RECONCILIATION_CLASSES: readonly ReconciliationClass[] = [
  'matched',
  'agent_done_ledger_missing',
  'amount_mismatch',
  'ledger_entry_without_step',
  'in_flight_ledger_has_it',
  'in_flight_ledger_lacks_it',
  'refund_over_limit_without_approval',
  'shipment_count_mismatch',
];

/** The agent tools whose effects reconciliation compares with a system of record. */
export const RECONCILED_TOOLS = ['issue_refund', 'reship_order', 'notify_customer', 'schedule_change'] as const;

/**
 * Repair owner of a difference (docs/product/reconciliation.md#owners: each non-empty class has a repair owner): money goes
 * to the payments lead, what the support policy should have stopped to the support lead, change
 * operations to the change owner, and unknown outcomes to on-call. A message no step explains
 * moves no money: like a shipment no step explains, it is the support lead's (ADR 0791).
 */
export function ownerOf(cls: ReconciliationClass, tool: string | null): string {
  if (tool === 'schedule_change' && cls !== 'in_flight_ledger_has_it' && cls !== 'in_flight_ledger_lacks_it') return 'change-owner';
  if (tool === 'notify_customer' && cls === 'ledger_entry_without_step') return 'support-lead';
  switch (cls) {
    case 'matched':
      return 'none';
    case 'agent_done_ledger_missing':
    case 'amount_mismatch':
    case 'ledger_entry_without_step':
      return 'payments-lead';
    case 'in_flight_ledger_has_it':
    case 'in_flight_ledger_lacks_it':
      return 'on-call';
    case 'refund_over_limit_without_approval':
    case 'shipment_count_mismatch':
      return 'support-lead';
  }
}

/**
 * Remediations a lead may approve per class (docs/product/reconciliation.md#remediations). `in_flight_ledger_has_it` has none: its
 * repair — resume the workflow with the ledger's evidence — is the only automatic one. Replay and
 * reverse exist for refunds only; cancel for shipments only.
 */
export function remediationsOf(cls: ReconciliationClass, tool: string | null): Remediation[] {
  const refund = tool === 'issue_refund';
  switch (cls) {
    case 'agent_done_ledger_missing':
      return refund ? ['replay', 'ratify'] : ['ratify'];
    case 'amount_mismatch':
      return ['reverse', 'ratify'];
    case 'ledger_entry_without_step':
      return refund ? ['adopt', 'reverse'] : ['adopt'];
    case 'in_flight_ledger_lacks_it':
      return refund ? ['replay', 'ratify'] : ['ratify'];
    case 'refund_over_limit_without_approval':
      return ['ratify', 'reverse'];
    case 'shipment_count_mismatch':
      return ['cancel_shipment', 'ratify'];
    case 'matched':
    case 'in_flight_ledger_has_it':
      return [];
  }
}

/**
 * The compensation action that carries each remediation in the ledger (its own workflow, action
 * and approval; never a tool of the agent's catalog, so never offered to a model).
 */
export const REMEDIATION_TOOL: Record<Remediation, string> = {
  ratify: 'ratify_difference',
  adopt: 'adopt_ledger_entry',
  replay: 'replay_refund',
  reverse: 'reverse_refund',
  cancel_shipment: 'cancel_shipment',
};
