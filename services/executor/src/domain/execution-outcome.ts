import { DependencyUnavailable } from '@gatehouse/ledger';

/**
 * What one execution job came to (docs/decisions/0270-one-operation-protocol.md). Each step of
 * `processExecution` returns one of these or hands over to the next step; the processor maps it
 * to the queue's action in one place ({@link toJobResult}).
 */
export type ExecutionOutcome =
  /** The adapter ran (or read-back settled it) and the outcome was recorded under the fence. */
  | { kind: 'executed'; status: 'succeeded' | 'failed' | 'failed_unknown' }
  /** A finished operation delivered again: its stored outcome was answered. */
  | { kind: 'replayed'; status: string }
  /**
   * The step is held, the run paused: by on-call's containment (`tool_disabled`: the tool switched
   * off), or by a lost audit tail until an operator acknowledges it (`audit_loss`, ADR 0795).
   */
  | { kind: 'held'; reason: 'tool_disabled' | 'audit_loss' }
  /** The call was answered `{executed: false, reason}`; `deadline` for the run's wall time. */
  | { kind: 'refused'; reason: string }
  /** Nothing to do for this job (stale version, action not claimable, run not executable, frozen). */
  | { kind: 'skipped'; reason: string }
  /** The operation key was seen with another digest (`idempotency_conflict`). */
  | { kind: 'conflict' }
  /** Facts changed since the decision: a new action version was recorded instead. */
  | { kind: 'reevaluated'; outcome: string }
  /** A newer lease holder owns the operation: nothing was written. */
  | { kind: 'fenced_out' }
  /** Another worker holds a live lease: the queue retries after backoff. */
  | { kind: 'busy'; actionId: string }
  /** Read-back proved no effect: reset to pending, the queue repeats it. */
  | { kind: 'retry_safe'; tool: string; reason: string }
  /** A dependency does not answer (within the outage ceiling): the worker holds the job. */
  | { kind: 'waiting'; error: DependencyUnavailable };

/** The queue's view of an outcome: a job return value, or an error the worker handles. */
export type JobResult = { value: string } | { error: Error };

/**
 * Maps an outcome to the BullMQ action: the job's return value (the strings the tests and the ops
 * dashboard read: `succeeded`, `replay:<status>`, `held:<reason>`, `refused:<reason>`,
 * `skip:<reason>`, `conflict`, `reevaluated:<outcome>`, `fenced_out`), or the error to throw —
 * `busy` and `retry_safe` through the given classes (retried by the queue), `waiting` as its
 * DependencyUnavailable (held by `holdWhileUnavailable`).
 */
export function toJobResult(
  o: ExecutionOutcome,
  errors: { busy: (message: string) => Error; retrySafe: (message: string) => Error },
): JobResult {
  switch (o.kind) {
    case 'executed':
      return { value: o.status };
    case 'replayed':
      return { value: `replay:${o.status}` };
    case 'held':
      return { value: `held:${o.reason}` };
    case 'refused':
      return { value: `refused:${o.reason}` };
    case 'skipped':
      return { value: `skip:${o.reason}` };
    case 'conflict':
      return { value: 'conflict' };
    case 'reevaluated':
      return { value: `reevaluated:${o.outcome}` };
    case 'fenced_out':
      return { value: 'fenced_out' };
    case 'busy':
      return { error: errors.busy(`operation of action ${o.actionId} is leased by another worker`) };
    case 'retry_safe':
      return { error: errors.retrySafe(`${o.tool} not executed (${o.reason}); safe to repeat`) };
    case 'waiting':
      return { error: o.error };
  }
}
