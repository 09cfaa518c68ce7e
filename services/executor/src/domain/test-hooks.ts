import { testFaults, type TestFaults } from '@gatehouse/contracts';

/** Points at which a test may make the executor process die (docs/product/hard-cases.md#crash-points). */
export type CrashPoint = 'before_dispatch' | 'after_dispatch' | 'after_record';

/**
 * The executor's test switches ({@link TestFaults}, where each is documented), read once at boot:
 * kill the process at a crash point, block the event loop before dispatch (a lost queue lock), or
 * remove one control for its control-removed test.
 */
const EXECUTOR_SWITCHES = [
  'crashTool',
  'blockBeforeDispatchMs',
  'disableWriteAhead',
  'disableReevaluation',
  'disableDigestBinding',
  'disableOutputBoundary',
  'disableWatchdog',
  'disableIdempotencyKey',
  'switchAtAdmissionOnly',
  'disableLease',
  'disableRecordRetry',
  'epochFailOpen',
  'disableReenableCohort',
  'ignoreSwitch',
  'switchNotRecheckedBeforeRetry',
  'auditNotRecheckedBeforeRetry',
] as const satisfies readonly (keyof TestFaults)[];

/** The executor's fields of {@link TestFaults}, with the crash point narrowed to the executor's own. */
export type TestHooks = Pick<TestFaults, (typeof EXECUTOR_SWITCHES)[number]> & { crashAt: CrashPoint | null };

/** The executor's crash points (the agent loop's `after_model_response` is not one). */
const EXECUTOR_POINTS: readonly string[] = ['before_dispatch', 'after_dispatch', 'after_record'];

/**
 * The executor's view of the process's test switches ({@link testFaults}: read once, validated
 * once; `env` other than `process.env` is parsed on its own, for tests).
 * @throws Error when a switch is set outside `GATEHOUSE_ENV=test` (never in production), every problem listed.
 */
export function readTestHooks(env: Record<string, string | undefined>): TestHooks {
  const f = testFaults(env);
  const picked = Object.fromEntries(EXECUTOR_SWITCHES.map((k) => [k, f[k]])) as Pick<TestFaults, (typeof EXECUTOR_SWITCHES)[number]>;
  return { ...picked, crashAt: f.crashAt && EXECUTOR_POINTS.includes(f.crashAt) ? (f.crashAt as CrashPoint) : null };
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
