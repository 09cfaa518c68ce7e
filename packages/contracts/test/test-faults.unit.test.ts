import { describe, expect, it } from 'vitest';
import { NO_TEST_FAULTS, parseTestFaults, resetTestFaultsForTests, testFaultProblems, testFaults } from '../src/test-faults.ts';

describe('test faults: one typed object, validated once', () => {
  it('is all off without a switch, in any environment', () => {
    expect(parseTestFaults({ GATEHOUSE_ENV: 'production' })).toEqual(NO_TEST_FAULTS);
    expect(parseTestFaults({ GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_CRASH_AT: '' })).toEqual(NO_TEST_FAULTS);
  });

  it('reads each kind of switch with GATEHOUSE_ENV=test', () => {
    const f = parseTestFaults({
      GATEHOUSE_ENV: 'test',
      GATEHOUSE_TEST_DISABLE_TRANSITION_TABLE: '1',
      GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS: '0',
      GATEHOUSE_TEST_CRASH_AT: 'after_record',
      GATEHOUSE_TEST_CRASH_TOOL: 'issue_refund',
      GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS: '3000',
    });
    expect(f).toMatchObject({
      disableTransitionTable: true,
      disableLimitLocks: false,
      crashAt: 'after_record',
      crashTool: 'issue_refund',
      blockBeforeDispatchMs: 3000,
    });
  });

  it('refuses every switch outside GATEHOUSE_ENV=test and lists every problem at once', () => {
    const env = {
      GATEHOUSE_ENV: 'production',
      GATEHOUSE_TEST_DISABLE_PG_GATE: '1',
      GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL: '1',
    };
    expect(testFaultProblems(env)).toEqual([
      'GATEHOUSE_TEST_DISABLE_PG_GATE may only be set with GATEHOUSE_ENV=test',
      'GATEHOUSE_TEST_CANCEL_WITHOUT_APPROVAL may only be set with GATEHOUSE_ENV=test',
    ]);
    expect(() => parseTestFaults(env)).toThrow(/DISABLE_PG_GATE[\s\S]*CANCEL_WITHOUT_APPROVAL/);
  });

  it('refuses malformed values and unknown names', () => {
    const problems = testFaultProblems({
      GATEHOUSE_ENV: 'test',
      GATEHOUSE_TEST_DISABLE_PG_GATE: 'yes',
      GATEHOUSE_TEST_CRASH_AT: 'somewhere',
      GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS: '-5',
      GATEHOUSE_TEST_DISABLE_EVERYTHING: '1',
    });
    expect(problems).toHaveLength(4);
    expect(problems.join('\n')).toMatch(/DISABLE_EVERYTHING: no such test switch/);
  });

  it('parses an explicit environment object on its own, without keeping it', () => {
    expect(testFaults({ GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DROP_REASONING: '1' }).dropReasoning).toBe(true);
    expect(testFaults().dropReasoning).toBe(false);
  });

  it('reads process.env once: a later flip changes nothing until a test resets it', () => {
    const saved = { env: process.env.GATEHOUSE_ENV, sw: process.env.GATEHOUSE_TEST_DISABLE_STATE_GATE };
    try {
      resetTestFaultsForTests();
      expect(testFaults().disableStateGate).toBe(false);
      Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_STATE_GATE: '1' });
      expect(testFaults().disableStateGate).toBe(false);
      resetTestFaultsForTests();
      expect(testFaults().disableStateGate).toBe(true);
    } finally {
      process.env.GATEHOUSE_ENV = saved.env;
      if (saved.sw === undefined) delete process.env.GATEHOUSE_TEST_DISABLE_STATE_GATE;
      else process.env.GATEHOUSE_TEST_DISABLE_STATE_GATE = saved.sw;
      resetTestFaultsForTests();
    }
  });
});
