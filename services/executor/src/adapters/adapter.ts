import type { BindingTarget } from '@gatehouse/credentials';
import type { Db } from '@gatehouse/ledger';

/**
 * What an adapter reports. `succeeded`: the effect exists (evidence = downstream id).
 * `failed`: the downstream refused or the effect certainly did not happen (safe to report).
 * `unknown`: the write may have happened and read-back could not tell (failed_unknown).
 * `retry_safe`: read-back proves nothing happened; the operation returns to `pending` and the
 * queue may repeat it (only adapters of non-idempotent downstreams report this).
 */
export type AdapterResult =
  | { status: 'succeeded'; data: Record<string, unknown>; evidenceRef: string | null; attempts: number }
  | { status: 'failed'; reason: string; retryable: boolean; attempts: number }
  | { status: 'unknown'; reason: string; attempts: number }
  | { status: 'retry_safe'; reason: string; attempts: number };

/** Inputs every adapter call gets: validated arguments, key, fence, token and deadline. */
export interface AdapterCall {
  stagingUrl: string;
  /** The Gatehouse ledger: local drafts (`prepare_change`) and authoritative plan reads. */
  ledger: Db;
  /** The workflow the action belongs to (identity from its authenticated record). */
  workflow: { id: string; tenant: string };
  args: Record<string, string | number | null>;
  /** Idempotency key `<workflowId>:action:<version>`, stable across every attempt. */
  operationKey: string;
  fencingToken: number;
  /**
   * Mints a fresh delegated token (60 s, single-use `jti`) for each attempt, bound to this
   * operation key, fencing token and `target` — the request's target and amount exactly as sent
   * (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
   */
  token: (target: BindingTarget) => Promise<string>;
  /** Absolute deadline, epoch ms. */
  deadlineMs: number;
  /** Read-back baseline captured (and committed) before dispatch, for tools without keys. */
  baseline: Record<string, unknown> | null;
}
