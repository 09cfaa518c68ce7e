import { afterEach, describe, expect, it } from 'vitest';
import { proposalDedupeRemoved } from '../src/record-decision.ts';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// The control-removed switch of the proposal dedupe (docs/decisions/0140-more-control-removed-switches.md).

const saved = { env: process.env.GATEHOUSE_ENV, sw: process.env.GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE };
afterEach(() => {
  for (const [k, v] of [
    ['GATEHOUSE_ENV', saved.env],
    ['GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE', saved.sw],
  ] as const) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

describe('GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE', () => {
  it('is off unless set, refused outside GATEHOUSE_ENV=test, on with it', () => {
    delete process.env.GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE;
    resetTestFaultsForTests();
    expect(proposalDedupeRemoved()).toBe(false);
    process.env.GATEHOUSE_TEST_DISABLE_PROPOSAL_DEDUPE = '1';
    process.env.GATEHOUSE_ENV = 'production';
    resetTestFaultsForTests();
    expect(() => proposalDedupeRemoved()).toThrow(/GATEHOUSE_ENV=test/);
    process.env.GATEHOUSE_ENV = 'test';
    resetTestFaultsForTests();
    expect(proposalDedupeRemoved()).toBe(true);
  });
});
