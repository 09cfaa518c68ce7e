/**
 * `@gatehouse/executor`: what runs outside this service's process — in-process tests and
 * benchmarks — may use of it. The process itself is `src/main.ts` (health port 7112).
 */
export { processExecution, executeSteps, LeaseBusy, SafeToRepeat, type ExecutionDeps } from './jobs/executions.processor.ts';
// The steps of one execution, for tests that stop between them (test/chaos/settle-for-checks.test.ts).
export { loadExecutionContext } from './jobs/steps/containment.step.ts';
export { claim, dispatchEffect, readClaimInputs } from './jobs/steps/dispatch.step.ts';
export { recordResult } from './jobs/steps/record.step.ts';
export { issueRefund } from './adapters/payments.adapter.ts';
export { adapters, reshipBaseline, resolveByReadBack } from './adapters/index.ts';
export {
  breakerFor,
  CircuitState,
  BREAKER_CONSECUTIVE_FAILURES,
  BREAKER_HALF_OPEN_AFTER_MS,
  BACKOFF_CAP_MS,
} from './adapters/resilience.ts';
export { readTestHooks, type TestHooks, type CrashPoint } from './domain/test-hooks.ts';
export { processReconcile, type ReconcileDeps } from './jobs/reconcile.processor.ts';
export { watchdogPass, type WatchdogDeps, type WatchdogReport } from './jobs/watchdog.ts';
