import type { BindingTarget } from '@gatehouse/credentials';
import type { Db } from '@gatehouse/ledger';

/**
 * What an adapter reports. `succeeded`: the effect exists (evidence = downstream id).
 * `failed`: the downstream refused or the effect certainly did not happen (safe to report).
 * `unknown`: the write may have happened and read-back could not tell (failed_unknown).
 * `retry_safe`: nothing happened — read-back proves it, or the connection was refused so nothing
 * was sent; the operation returns to `pending` and the queue repeats it (docs/decisions/0141-refused-connection-is-safe-to-repeat.md).
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
  /**
   * Idempotency key, stable across every attempt: `tk1-<sha256>:action:<version>` from the run's
   * tenant and ticket id (`ticketOperationKey`, ADR 0789), or a former release's
   * `<workflowId>:action:<version>`, or an out-of-band request's key. Opaque: sent, never parsed.
   */
  operationKey: string;
  /**
   * Test-only (`GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY`): send `<operationKey>:attempt:<n>` as the
   * downstream key, a fresh one per attempt. Absent or false in every real run.
   */
  freshKeyPerAttempt?: boolean;
  fencingToken: number;
  /**
   * Mints a fresh delegated token (60 s, single-use `jti`) for each attempt, bound to this
   * operation key, fencing token and `target` — the request's target and amount exactly as sent
   * (docs/decisions/0170-delegated-credentials-bind-the-operation.md). `op` is the key the
   * request sends when it is not the operation key (only the control-removed test's fresh keys).
   */
  token: (target: BindingTarget, op?: string) => Promise<string>;
  /** Absolute deadline of this execution, epoch ms: every attempt's timeout ends by it. */
  deadlineMs: number;
  /**
   * The run's working-time deadline, epoch ms (null or absent: none). The claim admitted the first
   * attempt within it; a retry is neither waited for nor sent past it — a 429 whose Retry-After
   * ends past it is `rate_limited_past_deadline`, a 5xx storm's backoff stops at it
   * (docs/product/hard-cases.md#rate-limits-and-5xx-storms, docs/decisions/0772-a-write-keeps-within-its-runs-deadline.md).
   */
  runDeadlineMs?: number | null;
  /** Read-back baseline captured (and committed) before dispatch, for tools without keys. */
  baseline: Record<string, unknown> | null;
  /**
   * Whether on-call's containment holds the tool now (switched off, or a staged re-enable that
   * does not admit this run), read under the tool's containment lock. An idempotent write asks it
   * before each attempt after the first that nothing came of (a 429, a 5xx, a refused
   * connection): that attempt is a new send, so a switch-off made during the wait holds it
   * (docs/decisions/0700-a-retry-is-held-by-a-switch-off.md). Absent: never held.
   */
  heldByContainment?: () => Promise<boolean>;
  /**
   * Whether the audit-health gate holds consequential execution now (a fresh reading, judged by the
   * gate's one rule). Asked by an idempotent write before the same retries as
   * {@link AdapterCall.heldByContainment}, after it: a retry made while audit cannot be written is
   * a new effect without evidence (docs/decisions/0706-a-retry-waits-for-audit.md). Absent: never held.
   */
  heldByAudit?: () => Promise<boolean>;
}

/** The `retry_safe` reason of a retry the tool's containment held before it was sent. */
export const HELD_BEFORE_RETRY = 'held_by_containment_before_retry';

/** The `retry_safe` reason of a retry the audit-health gate held before it was sent (ADR 0706). */
export const AUDIT_HELD_BEFORE_RETRY = 'held_by_audit_health_before_retry';

/** The `retry_safe` reason of a retry not sent because its containment or audit check could not be read (ADR 0706). */
export const HELD_CHECK_UNREADABLE = 'held_check_unreadable_before_retry';
