/**
 * Rule id of an approval that a reconciliation remediation asked a lead for (docs/product/reconciliation.md#remediations;
 * docs/decisions/0050-reconciliation.md). Such an approval names a compensation action (`reverse_refund`, `cancel_shipment`, …) in a
 * workflow of its own: the reconciliation job executes it once approved, so deciding it enqueues
 * no executor or agent-loop job.
 */
export const REMEDIATION_RULE_ID = 'RECON';
