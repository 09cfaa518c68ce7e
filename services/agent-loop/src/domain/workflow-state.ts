import { AS_A_NEW_TICKET, type StopReason } from '@gatehouse/contracts';
import { stopRun, TERMINAL_STATES as LEDGER_TERMINAL_STATES, type Trx, type WorkflowState } from '@gatehouse/ledger';

export type { StopReason } from '@gatehouse/contracts';

/** Human-readable next step for the rep, per stop reason. */
export const NEXT_STEP: Record<StopReason, string> = {
  validation_failed: `The agent kept proposing invalid actions; handle the ticket by hand or resubmit it with clearer text ${AS_A_NEW_TICKET}.`,
  denied: 'Policy denied the request; see the denied actions and their rules.',
  approval_expired:
    'The approval expired before its step ran (undecided, or approved but held); the run has stopped: submit a new ticket to ask again.',
  budget_exhausted: `The run used its whole budget; review what it did and resubmit the remaining work ${AS_A_NEW_TICKET}.`,
  audit_unavailable: 'Audit storage was unavailable, so nothing consequential ran; retry once on-call reports audit healthy.',
  tool_disabled: 'A tool was switched off by on-call; the workflow resumes when it is switched back on.',
  quarantined: 'The job belonged to a release under rollback; on-call must requeue or discard it.',
  model_error: `The model rejected the request; on-call should check the model service, then resubmit it ${AS_A_NEW_TICKET}.`,
  dependency_unavailable: `A service the run depends on stayed unavailable past the outage ceiling; on-call should restore it, then see the actions for what already ran and resubmit the rest ${AS_A_NEW_TICKET}.`,
  step_failed: `A step of this run failed every retry; on-call should check the service logs. See the actions for what already ran, then resubmit the rest ${AS_A_NEW_TICKET}.`,
};

/** States from which nothing more happens without a person (the ledger's list, as a set). */
export const TERMINAL_STATES: ReadonlySet<WorkflowState> = new Set(LEDGER_TERMINAL_STATES);

/** Moves a workflow to `stopped(reason)` with its next step (default: the reason's), and audits it. */
export async function stopWorkflow(
  trx: Trx,
  wf: { id: string; release_id: string },
  reason: StopReason,
  nextStep: string = NEXT_STEP[reason],
): Promise<void> {
  await stopRun(trx, wf, reason, nextStep, 'agent-loop');
}
