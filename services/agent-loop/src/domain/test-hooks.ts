/**
 * Fault and control-removal hooks of the agent loop that only tests set, honoured only with
 * `GATEHOUSE_ENV=test`: kill the process right after the model answered (before anything is
 * recorded), offer every tool regardless of state and mode, or drop the model's reasoning items
 * instead of sending them back next round (control-removed tests).
 */
export interface LoopTestHooks {
  crashAfterModelResponse: boolean;
  disableToolFilter: boolean;
  /** `GATEHOUSE_TEST_DROP_REASONING=1`: reasoning items are not kept for the next round (ADR 0145). */
  dropReasoning: boolean;
}

/**
 * Reads the hooks from `env`.
 * @throws Error when a hook is set outside `GATEHOUSE_ENV=test`.
 */
export function readLoopTestHooks(env: Record<string, string | undefined>): LoopTestHooks {
  const crash = env.GATEHOUSE_TEST_CRASH_AT === 'after_model_response';
  const noFilter = env.GATEHOUSE_TEST_DISABLE_TOOL_FILTER === '1';
  const dropReasoning = env.GATEHOUSE_TEST_DROP_REASONING === '1';
  if ((crash || noFilter || dropReasoning) && env.GATEHOUSE_ENV !== 'test')
    throw new Error('agent-loop test hooks may only be set with GATEHOUSE_ENV=test');
  return { crashAfterModelResponse: crash, disableToolFilter: noFilter, dropReasoning };
}
