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
   * Do not check the tool switch at execution at all (control-removed test of the incident drill:
   * after containment switches a tool off, its effects continue).
   */
  ignoreSwitch?: boolean;
  /** Claim an operation even while another worker's lease on it is live (control-removed test of the replicas, ADR 0195). */
  disableLease?: boolean;
  /** Mint with epoch 0 when the revocation epoch cannot be read (control-removed test of the fail-closed epoch). */
  epochFailOpen?: boolean;
}

const NONE: TestHooks = {
  crashAt: null,
  crashTool: null,
  blockBeforeDispatchMs: 0,
  disableWriteAhead: false,
  disableReevaluation: false,
  disableDigestBinding: false,
  disableOutputBoundary: false,
  disableWatchdog: false,
  disableIdempotencyKey: false,
  switchAtAdmissionOnly: false,
  disableLease: false,
};

/**
 * Reads the hooks from `env`.
 * @throws Error when a hook is set outside `GATEHOUSE_ENV=test` (never in production).
 */
export function readTestHooks(env: Record<string, string | undefined>): TestHooks {
  const set = [
    'GATEHOUSE_TEST_CRASH_AT',
    'GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS',
    'GATEHOUSE_TEST_DISABLE_WRITE_AHEAD',
    'GATEHOUSE_TEST_DISABLE_REEVALUATION',
    'GATEHOUSE_TEST_DISABLE_DIGEST_BINDING',
    'GATEHOUSE_TEST_DISABLE_OUTPUT_BOUNDARY',
    'GATEHOUSE_TEST_DISABLE_WATCHDOG',
    'GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY',
    'GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY',
    'GATEHOUSE_TEST_DISABLE_SWITCH',
    'GATEHOUSE_TEST_DISABLE_LEASE',
    'GATEHOUSE_TEST_EPOCH_FAIL_OPEN',
  ].filter((k) => env[k]);
  if (!set.length) return NONE;
  if (env.GATEHOUSE_ENV !== 'test') throw new Error(`${set.join(', ')} may only be set with GATEHOUSE_ENV=test`);
  const crashAt = env.GATEHOUSE_TEST_CRASH_AT ?? null;
  if (crashAt && !['before_dispatch', 'after_dispatch', 'after_record'].includes(crashAt))
    throw new Error(`unknown crash point ${crashAt}`);
  return {
    crashAt: crashAt as CrashPoint | null,
    crashTool: env.GATEHOUSE_TEST_CRASH_TOOL ?? null,
    blockBeforeDispatchMs: Number(env.GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS ?? 0),
    disableWriteAhead: env.GATEHOUSE_TEST_DISABLE_WRITE_AHEAD === '1',
    disableReevaluation: env.GATEHOUSE_TEST_DISABLE_REEVALUATION === '1',
    disableDigestBinding: env.GATEHOUSE_TEST_DISABLE_DIGEST_BINDING === '1',
    disableOutputBoundary: env.GATEHOUSE_TEST_DISABLE_OUTPUT_BOUNDARY === '1',
    disableWatchdog: env.GATEHOUSE_TEST_DISABLE_WATCHDOG === '1',
    disableIdempotencyKey: env.GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY === '1',
    switchAtAdmissionOnly: env.GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY === '1',
    ignoreSwitch: env.GATEHOUSE_TEST_DISABLE_SWITCH === '1',
    disableLease: env.GATEHOUSE_TEST_DISABLE_LEASE === '1',
    epochFailOpen: env.GATEHOUSE_TEST_EPOCH_FAIL_OPEN === '1',
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
