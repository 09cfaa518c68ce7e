import { testFaults } from '@gatehouse/contracts';

/**
 * Fault and control-removal hooks of the agent loop that only tests set, honoured only with
 * `GATEHOUSE_ENV=test`: kill the process right after the model answered (before anything is
 * recorded), offer every tool regardless of state and mode, or drop the model's reasoning items
 * instead of sending them back next round, or store the model's final message unbounded
 * (control-removed tests).
 */
export interface LoopTestHooks {
  crashAfterModelResponse: boolean;
  disableToolFilter: boolean;
  /** `GATEHOUSE_TEST_DROP_REASONING=1`: reasoning items are not kept for the next round (ADR 0145). */
  dropReasoning: boolean;
  /** `GATEHOUSE_TEST_DISABLE_OUTPUT_BOUNDARY=1`: the model's final message is stored as it came. */
  disableOutputBoundary: boolean;
}

/**
 * Reads the hooks from `env`.
 * @throws Error when a hook is set outside `GATEHOUSE_ENV=test`.
 */
export function readLoopTestHooks(env: Record<string, string | undefined>): LoopTestHooks {
  const faults = testFaults(env);
  return {
    crashAfterModelResponse: faults.crashAt === 'after_model_response',
    disableToolFilter: faults.disableToolFilter,
    dropReasoning: faults.dropReasoning,
    disableOutputBoundary: faults.disableOutputBoundary,
  };
}
