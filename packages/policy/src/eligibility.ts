import type { ToolDefinition } from '@gatehouse/tools';

/**
 * Tools the model may be offered — and the gateway may accept — for a workflow (SPEC §9):
 * `investigate` mode offers only non-consequential tools; `act` mode (an explicit choice of the
 * user) also offers consequential ones. Terminal or parked workflows offer nothing.
 */
export function eligibleTools(
  tools: readonly ToolDefinition[],
  workflow: { mode: 'investigate' | 'act'; state: string },
  grantedTools: readonly string[],
): ToolDefinition[] {
  // A paused workflow is live: its held step resumes when the tool is switched back on.
  if (!['received', 'investigating', 'awaiting_approval', 'executing', 'paused'].includes(workflow.state)) return [];
  return tools.filter((t) => grantedTools.includes(t.name) && (workflow.mode === 'act' || !t.consequential));
}
