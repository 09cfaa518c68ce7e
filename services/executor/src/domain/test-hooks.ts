import { testFaults } from '@gatehouse/contracts';

/** Points at which a test may make the executor process die (docs/product/hard-cases.md#crash-points). */
export type CrashPoint = 'before_dispatch' | 'after_dispatch' | 'after_record';

/**
 * Fault hooks that only tests set (through the environment, honoured only when
 * `GATEHOUSE_ENV=test`): kill the process at a crash point, block the event loop before
 * dispatch (a lost queue lock), or remove the write-ahead dispatch mark (control-removed test).
 */
export interface TestHooks {
  crashAt: CrashPoint | null;
  /** Only crash for this tool (all tools when null). */
  crashTool: string | null;
  blockBeforeDispatchMs: number;
  disableWriteAhead: boolean;
  /** Skip the policy re-evaluation at execution (control-removed test). */
  disableReevaluation: boolean;
  /** Consume an approval without checking it names this action (control-removed test). */
  disableDigestBinding: boolean;
  /** Hand raw adapter results to the model, without the untrusted-output boundary (control-removed test). */
  disableOutputBoundary: boolean;
  /** Do not start the watchdog (control-removed test of the Redis-loss recovery). */
  disableWatchdog: boolean;
  /**
   * Send a fresh `Idempotency-Key` with every attempt of an idempotent write instead of the
   * operation key (control-removed test: a lost response then pays twice).
   */
  disableIdempotencyKey: boolean;
  /**
   * Judge the tool switch as it stood when the action was admitted, not at execution
   * (control-removed test: a tool switched off after admission still executes).
   */
  switchAtAdmissionOnly: boolean;
  /**
   * Let every workflow through a tool at the `cohort` stage of its staged re-enable, not only the
   * cohort's (control-removed test of docs/decisions/0310-staged-reenable.md).
   */
  disableReenableCohort?: boolean;
  /**
   * Do not check the tool switch at execution at all (control-removed test of the incident drill:
   * after containment switches a tool off, its effects continue).
   */
  ignoreSwitch?: boolean;
  /** Claim an operation even while another worker's lease on it is live (control-removed test of the replicas, ADR 0195). */
  disableLease?: boolean;
  /** Mint with epoch 0 when the revocation epoch cannot be read (control-removed test of the fail-closed epoch). */
  epochFailOpen?: boolean;
}

/** The executor's crash points (the agent loop's `after_model_response` is not one). */
const EXECUTOR_POINTS: readonly string[] = ['before_dispatch', 'after_dispatch', 'after_record'];

/**
 * The executor's view of the process's test switches ({@link testFaults}: read once, validated
 * once; `env` other than `process.env` is parsed on its own, for tests).
 * @throws Error when a switch is set outside `GATEHOUSE_ENV=test` (never in production), every problem listed.
 */
export function readTestHooks(env: Record<string, string | undefined>): TestHooks {
  const f = testFaults(env);
  return {
    crashAt: f.crashAt && EXECUTOR_POINTS.includes(f.crashAt) ? (f.crashAt as CrashPoint) : null,
    crashTool: f.crashTool,
    blockBeforeDispatchMs: f.blockBeforeDispatchMs,
    disableWriteAhead: f.disableWriteAhead,
    disableReevaluation: f.disableReevaluation,
    disableDigestBinding: f.disableDigestBinding,
    disableOutputBoundary: f.disableOutputBoundary,
    disableWatchdog: f.disableWatchdog,
    disableIdempotencyKey: f.disableIdempotencyKey,
    switchAtAdmissionOnly: f.switchAtAdmissionOnly,
    disableLease: f.disableLease,
    epochFailOpen: f.epochFailOpen,
    disableReenableCohort: f.disableReenableCohort,
    ignoreSwitch: f.ignoreSwitch,
  };
}

/** Kills the process with SIGKILL (no graceful shutdown) when `point` is the configured one. */
export function crashIfAt(hooks: TestHooks, point: CrashPoint, tool: string): void {
  if (hooks.crashAt === point && (!hooks.crashTool || hooks.crashTool === tool)) process.kill(process.pid, 'SIGKILL');
}

/** Blocks the event loop synchronously (the queue lock cannot be renewed meanwhile). */
export function blockEventLoop(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy wait on purpose
  }
}
