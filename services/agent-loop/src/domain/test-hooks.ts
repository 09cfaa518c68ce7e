/**
 * Fault and control-removal hooks of the agent loop that only tests set, honoured only with
 * `GATEHOUSE_ENV=test`: kill the process right after the model answered (before anything is
 * recorded), or offer every tool regardless of state and mode (control-removed test).
 */
export interface LoopTestHooks {
  crashAfterModelResponse: boolean;
  disableToolFilter: boolean;
}

/**
 * Reads the hooks from `env`.
 * @throws Error when a hook is set outside `GATEHOUSE_ENV=test`.
 */
export function readLoopTestHooks(env: Record<string, string | undefined>): LoopTestHooks {
  const crash = env.GATEHOUSE_TEST_CRASH_AT === 'after_model_response';
  const noFilter = env.GATEHOUSE_TEST_DISABLE_TOOL_FILTER === '1';
  if ((crash || noFilter) && env.GATEHOUSE_ENV !== 'test') throw new Error('agent-loop test hooks may only be set with GATEHOUSE_ENV=test');
  return { crashAfterModelResponse: crash, disableToolFilter: noFilter };
}
