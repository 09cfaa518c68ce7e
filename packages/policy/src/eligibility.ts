import type { ToolDefinition } from '@gatehouse/tools';

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
      (!t.states || t.states.includes(workflow.state)),
  );
}
