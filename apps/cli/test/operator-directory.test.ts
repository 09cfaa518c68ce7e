import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import { authorizeOperator, OperatorRefused } from '@gatehouse/operations';
import { isDirectoryOperator } from '@gatehouse/platform';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// Operator authority comes from the directory (world.json), not from the token's roles claim
// (docs/decisions/0180-strict-production-mode.md): a token that calls itself an operator is refused.
const SECRET = 'local-auth-secret-change-me';
let t: TestDatabase;
const opts = { verifier: { secret: SECRET }, hmacKey: 'local-audit-hmac-key-change-me', command: 'switch off' };

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_OPERATOR_FROM_TOKEN;
  resetTestFaultsForTests();
});

const refusals = async () =>
  (await t.db.selectFrom('audit_outbox').select('event').execute()).filter((r) => JSON.stringify(r.event).includes('not_an_operator'))
    .length;

describe('operator authority from the directory', () => {
  it('a rep whose token claims the operator role is refused and the refusal audited', async () => {
    const forged = await signUserToken({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['operator'] }, SECRET);
    const before = await refusals();
    await expect(authorizeOperator(t.db, forged, opts)).rejects.toThrow(OperatorRefused);
    await expect(authorizeOperator(t.db, forged, opts)).rejects.toThrow(/not_an_operator/);
    expect(await refusals()).toBe(before + 2);
  });

  it('an operator of one tenant is not one in another tenant', () => {
    expect(isDirectoryOperator({ sub: 'ops-gus', tenant: 'quillfeather', roles: [] })).toBe(true);
    expect(isDirectoryOperator({ sub: 'ops-gus', tenant: 'northwind', roles: ['operator'] })).toBe(false);
    expect(isDirectoryOperator({ sub: 'nobody', tenant: 'quillfeather', roles: ['operator'] })).toBe(false);
  });

  it('the directory operator is accepted whatever roles the token lists', async () => {
    const plain = await signUserToken({ sub: 'ops-gus', tenant: 'quillfeather', roles: [] }, SECRET);
    expect(await authorizeOperator(t.db, plain, opts)).toEqual({ id: 'ops-gus', tenant: 'quillfeather' });
  });

  it('control removed (GATEHOUSE_TEST_OPERATOR_FROM_TOKEN): the forged token gets in; refused outside GATEHOUSE_ENV=test', async () => {
    const forged = await signUserToken({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['operator'] }, SECRET);
    process.env.GATEHOUSE_TEST_OPERATOR_FROM_TOKEN = '1';
    resetTestFaultsForTests();
    const saved = process.env.GATEHOUSE_ENV;
    try {
      process.env.GATEHOUSE_ENV = 'local';
      resetTestFaultsForTests();
      expect(() => isDirectoryOperator({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['operator'] })).toThrow(/GATEHOUSE_ENV=test/);
      process.env.GATEHOUSE_ENV = 'test';
      resetTestFaultsForTests();
      expect(await authorizeOperator(t.db, forged, opts)).toEqual({ id: 'rep-ana', tenant: 'quillfeather' });
    } finally {
      process.env.GATEHOUSE_ENV = saved;
      resetTestFaultsForTests();
    }
  });
});
