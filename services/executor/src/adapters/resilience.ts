import { circuitBreaker, ConsecutiveBreaker, DelegateBackoff, handleWhen, retry, wrap, type IRetryBackoffContext } from 'cockatiel';
import { SystemError } from '@gatehouse/contracts';

/** A failure the downstream contract says may be retried with the same idempotency key. */
export class RetryableDownstreamError extends SystemError {
  /** Server-requested delay (Retry-After), ms. */
  readonly retryAfterMs: number | undefined;
  /** True when no answer came back: the write may have happened. */
  readonly ambiguous: boolean;
  /**
   * True when the connection was refused: nothing was sent and the downstream bore no load, so
   * it is retried but does not count towards the circuit breaker (a long outage then holds the
   * step instead of failing it, docs/decisions/0141-refused-connection-is-safe-to-repeat.md).
   */
  readonly refused: boolean;
  /**
   * True when the wait the downstream asked for (Retry-After) ends past the deadline: the
   * attempt counts as a failure towards the breaker, but it is not retried.
   */
  readonly pastDeadline: boolean;
  /**
   * True for a 429 after the one retry a 429 gets (docs/decisions/0753-a-429-gets-one-retry.md):
   * it counts as a failure towards the breaker, and it is not retried.
   */
  readonly rateLimitedAgain: boolean;
  constructor(
    reason: string,
    opts: { retryAfterMs?: number; ambiguous?: boolean; refused?: boolean; pastDeadline?: boolean; rateLimitedAgain?: boolean } = {},
  ) {
    super(reason);
    this.retryAfterMs = opts.retryAfterMs;
    this.ambiguous = opts.ambiguous ?? false;
    this.refused = opts.refused ?? false;
    this.pastDeadline = opts.pastDeadline ?? false;
    this.rateLimitedAgain = opts.rateLimitedAgain ?? false;
  }

  /** Whether the retry policy sends the call again: not past the deadline, not a 429 after its one retry. */
  get retried(): boolean {
    return !this.pastDeadline && !this.rateLimitedAgain;
  }
}

/** Cap of the exponential backoff between attempts, ms. */
export const BACKOFF_CAP_MS = 2000;
const BACKOFF_BASE_MS = 100;

/** Consecutive retryable failures of one tenant's calls to one downstream that open their circuit breaker. */
export const BREAKER_CONSECUTIVE_FAILURES = 5;
/** How long an open breaker sheds calls before it lets one probe through (half-open), ms. */
export const BREAKER_HALF_OPEN_AFTER_MS = 10_000;

/** Breakers by downstream and tenant (`<downstream> <tenant>`); one per pair the process has called. */
const breakers = new Map<string, ReturnType<typeof circuitBreaker>>();

/**
 * The circuit breaker of one tenant's calls to one downstream (cockatiel): opens after
 * {@link BREAKER_CONSECUTIVE_FAILURES} consecutive retryable failures (a refused connection is
 * not one), half-opens after {@link BREAKER_HALF_OPEN_AFTER_MS}. Shared by every execution of
 * that tenant in the process. Keyed per tenant so that one tenant's 5xx storm sheds only that
 * tenant's calls (docs/decisions/0763-a-circuit-breaker-per-downstream-and-tenant.md); a
 * downstream down for everyone opens every calling tenant's breaker after its own five failures.
 */
export function breakerFor(downstream: string, tenant: string): ReturnType<typeof circuitBreaker> {
  const key = `${downstream} ${tenant}`;
  let b = breakers.get(key);
  if (!b) {
    b = circuitBreaker(
      handleWhen((e) => e instanceof RetryableDownstreamError && !e.refused),
      { halfOpenAfter: BREAKER_HALF_OPEN_AFTER_MS, breaker: new ConsecutiveBreaker(BREAKER_CONSECUTIVE_FAILURES) },
    );
    breakers.set(key, b);
  }
  return b;
}

/**
 * Retry policy for an idempotent write (cockatiel): at most `maxAttempts` attempts, waiting the
 * server's Retry-After when given, else full-jitter exponential backoff capped at
 * {@link BACKOFF_CAP_MS}; every wait is clamped to the time left before `deadlineMs` (epoch ms, or a
 * function giving it at each wait: the bound of the next retry can change with what came back).
 * Only {@link RetryableDownstreamError}s are retried (not one whose wait ends past the deadline,
 * nor a 429 after the one retry a 429 gets: {@link RetryableDownstreamError.retried}), through the
 * circuit breaker of `tenant`'s calls to `downstream` ({@link breakerFor}).
 */
export function idempotentWritePolicy(downstream: string, tenant: string, maxAttempts: number, deadlineMs: number | (() => number)) {
  const deadline = typeof deadlineMs === 'number' ? () => deadlineMs : deadlineMs;
  const backoff = new DelegateBackoff<IRetryBackoffContext<unknown>>((ctx) => {
    const err = 'error' in ctx.result ? ctx.result.error : undefined;
    const wanted =
      err instanceof RetryableDownstreamError && err.retryAfterMs !== undefined
        ? err.retryAfterMs
        : Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** ctx.attempt);
    return Math.max(0, Math.min(wanted, deadline() - Date.now()));
  });
  return wrap(
    retry(
      handleWhen((e) => e instanceof RetryableDownstreamError && e.retried),
      { maxAttempts: maxAttempts - 1, backoff },
    ),
    breakerFor(downstream, tenant),
  );
}

/** Breaker states (cockatiel), re-exported for the tests that observe a breaker. */
export { CircuitState } from 'cockatiel';
