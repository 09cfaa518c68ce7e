import { afterEach, describe, expect, it } from 'vitest';
import { parseProposal } from '../src/parse.ts';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// The control-removed switch of strict parsing (docs/decisions/0140-more-control-removed-switches.md):
// only with GATEHOUSE_ENV=test, and then unknown fields are kept in the normalized arguments.

const saved = { env: process.env.GATEHOUSE_ENV, sw: process.env.GATEHOUSE_TEST_DISABLE_STRICT_PARSING };
afterEach(() => {
  for (const [k, v] of [
    ['GATEHOUSE_ENV', saved.env],
    ['GATEHOUSE_TEST_DISABLE_STRICT_PARSING', saved.sw],
  ] as const) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

const args = JSON.stringify({ orderId: 'O-1002', amount: '30.00', reason: 'late', approved_by: 'lead-eli' });

describe('GATEHOUSE_TEST_DISABLE_STRICT_PARSING', () => {
  it('unset: approved_by is an invalid argument', () => {
    expect(parseProposal('issue_refund', args)).toMatchObject({ ok: false, error: 'invalid_arguments' });
  });

  it('set outside GATEHOUSE_ENV=test: refused', () => {
    process.env.GATEHOUSE_ENV = 'production';
    process.env.GATEHOUSE_TEST_DISABLE_STRICT_PARSING = '1';
    resetTestFaultsForTests();
    expect(() => parseProposal('issue_refund', args)).toThrow(/GATEHOUSE_ENV=test/);
  });

  it('set with GATEHOUSE_ENV=test: the unknown field is carried into the arguments', () => {
    process.env.GATEHOUSE_ENV = 'test';
    process.env.GATEHOUSE_TEST_DISABLE_STRICT_PARSING = '1';
    resetTestFaultsForTests();
    expect(parseProposal('issue_refund', args)).toMatchObject({
      ok: true,
      args: { orderId: 'O-1002', amountCents: 3000, reason: 'late', approved_by: 'lead-eli' },
    });
  });
});
