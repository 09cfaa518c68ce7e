import { describe, expect, it } from 'vitest';
import { changeCaseFacts, ChangeBoundaryCaseSchema, evaluateChange, loadBundle, type ChangeBundle } from '../src/index.ts';

const bundle = loadBundle('change-c1') as ChangeBundle;
const held = { planId: 'plan_0000000000000009', status: 'succeeded', operationKey: 'wf-1:action:3' };

/** The facts of `eng-lou` proposing `tool` for CHG-101 in `state`, its plan matching (schedule). */
function facts(tool: 'prepare_change' | 'schedule_change', state: 'investigating' | 'awaiting_approval') {
  const c = ChangeBoundaryCaseSchema.parse({
    name: tool,
    tool,
    user: 'eng-lou',
    change: 'CHG-101',
    state,
    window: 'manual-window',
    plan: { window: 'manual-window', note: null },
    expect: { decision: 'DENY', ruleId: 'C2' },
  });
  return changeCaseFacts(c);
}

describe('change-c1 C2: a change this workflow already scheduled is not prepared or scheduled again (ADR 0694)', () => {
  it('without a holding schedule: prepare allowed, schedule needs its owner', () => {
    expect(evaluateChange(facts('prepare_change', 'investigating'), bundle)).toMatchObject({ decision: 'ALLOW' });
    expect(evaluateChange({ ...facts('schedule_change', 'awaiting_approval'), scheduled: null }, bundle)).toMatchObject({
      decision: 'REQUIRE_APPROVAL',
      ruleId: 'C5',
    });
  });

  it.each([
    ['prepare_change', 'investigating'],
    ['schedule_change', 'awaiting_approval'],
  ] as const)('%s with a holding schedule: denied by C2, naming it', (tool, state) => {
    const d = evaluateChange({ ...facts(tool, state), scheduled: held }, bundle);
    expect(d).toMatchObject({ decision: 'DENY', ruleId: 'C2', policyRevision: 'change-c1' });
    expect(d.reason).toContain('plan plan_0000000000000009, succeeded, operation wf-1:action:3');
  });
});
