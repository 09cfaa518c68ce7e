import type { ToolDefinition } from '@gatehouse/tools';
import { testFaults } from '@gatehouse/contracts';

/** Workflow states in which a workflow may be offered tools (a paused one resumes its held step). */
const LIVE_STATES = ['received', 'investigating', 'awaiting_approval', 'executing', 'paused'];

/**
 * Tools the model may be offered — and the gateway may accept — for a workflow
 * (docs/product/users-and-tools.md#modes, docs/product/public-contract.md#intake):
 * granted to the agent; `investigate` mode offers only read tools, `act` mode (an explicit choice
 * of the user) also the writes; a tool with `states` only in those states (change pack).
 * Terminal or parked workflows offer nothing. `tools` is the workflow's pack catalog. With
 * `writesEnabled: false` (a candidate release before `enable-writes`, or one rolled back) no
 * consequential tool is eligible (docs/product/releases.md).
 */
export function eligibleTools(
  tools: readonly ToolDefinition[],
  workflow: { mode: 'investigate' | 'act'; state: string; writesEnabled?: boolean },
  grantedTools: readonly string[],
): ToolDefinition[] {
  if (!LIVE_STATES.includes(workflow.state)) return [];
  return tools.filter(
    (t) =>
      grantedTools.includes(t.name) &&
      (workflow.writesEnabled !== false || !t.consequential) &&
      (workflow.mode === 'act' || t.effectClass === 'sensitive_read') &&
      toolOfferedIn(t, workflow.state),
  );
}

/**
 * The state gate of the change pack (docs/product/users-and-tools.md#change-pack): true when
 * `tool` has no `states` or lists `state`. `GATEHOUSE_TEST_DISABLE_STATE_GATE=1` removes the gate
 * (every state offers every tool) for the test that shows it is load-bearing
 * (test/transitions/invalid-transitions.test.ts).
 * @throws Error when the switch is set outside `GATEHOUSE_ENV=test`.
 */
export function toolOfferedIn(tool: Pick<ToolDefinition, 'states'>, state: string): boolean {
  if (testFaults().disableStateGate) return true;
  return !tool.states || tool.states.includes(state);
}
