/** The stop reasons a step's result job may carry (`results` queue contract). */
export const RESULT_STOP_REASONS = [
  'validation_failed',
  'denied',
  'approval_expired',
  'budget_exhausted',
  'audit_unavailable',
  'tool_disabled',
  'quarantined',
  'dependency_unavailable',
] as const;

/**
 * Every reason a workflow stops (docs/product/states.md#stop-reasons), defined once: the ledger's
 * `stop_reason`, the results contract, the loop's next steps and the metrics all read this list.
 * - `model_error` is the loop's own (the model rejected the request);
 * - `dependency_unavailable`: a dependency stayed unavailable past the outage ceiling
 *   (`checkWorkingTime` in the ledger, docs/decisions/0110-outage-time.md);
 * - `step_failed` is written by the dead letter of a step or the watchdog, never by the loop.
 */
export const STOP_REASONS = [...RESULT_STOP_REASONS, 'model_error', 'step_failed'] as const;

/** One of {@link STOP_REASONS}. */
export type StopReason = (typeof STOP_REASONS)[number];

/**
 * How a next step tells the requester to ask again after a run stopped: a tenant's `ticketId`
 * maps to one workflow (docs/product/public-contract.md#intake), so sending the same ticket again
 * gives back the stopped run, and other text under its id is `409 ticket_conflict`. Every next
 * step that says "resubmit" carries this phrase (docs/decisions/0782-resubmit-names-a-new-ticket-id.md).
 */
export const AS_A_NEW_TICKET = 'as a new ticket (a new ticketId: sending this one again gives back this run)';
