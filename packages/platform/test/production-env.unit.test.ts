import { describe, expect, it } from 'vitest';
import { parseEnv, productionProblems, MIN_SECRET_BYTES } from '../src/index.ts';

/** A production environment with nothing wrong: every test below changes one thing. */
export const GOOD_PRODUCTION: Record<string, string> = {
  GATEHOUSE_ENV: 'production',
  GATEHOUSE_AUDIT_HMAC_KEY: 'h'.repeat(MIN_SECRET_BYTES),
  GATEHOUSE_AUTH_JWKS_URL: 'https://idp.example.com/jwks.json',
  GATEHOUSE_AUTH_ISSUER: 'https://idp.example.com/',
  GATEHOUSE_AUTH_AUDIENCE: 'gatehouse',
  GATEHOUSE_AUTH_ALGORITHMS: 'RS256,ES256',
};

const refusal = (env: Record<string, string | undefined>): string => {
  try {
    parseEnv({}, env);
    return '';
  } catch (err) {
    return (err as Error).message;
  }
};

describe('strict production mode (docs/decisions/0180-strict-production-mode.md)', () => {
  it('GATEHOUSE_ENV defaults to production: an empty environment is refused', () => {
    const message = refusal({});
    expect(message).toMatch(/refusing to start in production/);
    expect(message).toMatch(/GATEHOUSE_AUDIT_HMAC_KEY: must be set/);
  });

  it('a complete production environment is accepted (each refusal below is the one change)', () => {
    expect(productionProblems(parseEnv({}, { ...GOOD_PRODUCTION, GATEHOUSE_ENV: 'local' }), GOOD_PRODUCTION)).toEqual([]);
    expect(parseEnv({}, GOOD_PRODUCTION).GATEHOUSE_ENV).toBe('production');
  });

  it.each([
    ['a default secret', { GATEHOUSE_AUDIT_HMAC_KEY: 'local-audit-hmac-key-change-me' }, /GATEHOUSE_AUDIT_HMAC_KEY: must be set/],
    ['a missing secret', { GATEHOUSE_AUDIT_HMAC_KEY: undefined }, /GATEHOUSE_AUDIT_HMAC_KEY: must be set/],
    ['a weak secret', { GATEHOUSE_AUDIT_HMAC_KEY: 'x'.repeat(MIN_SECRET_BYTES - 1) }, /GATEHOUSE_AUDIT_HMAC_KEY: too weak/],
    [
      'the user-token secret shared',
      { GATEHOUSE_AUTH_SECRET: 'h'.repeat(MIN_SECRET_BYTES) },
      /GATEHOUSE_AUDIT_HMAC_KEY: the same value as GATEHOUSE_AUTH_SECRET/,
    ],
    ['HS256 user tokens (no JWKS)', { GATEHOUSE_AUTH_JWKS_URL: undefined }, /GATEHOUSE_AUTH_JWKS_URL: must be set/],
    ['no issuer', { GATEHOUSE_AUTH_ISSUER: undefined }, /GATEHOUSE_AUTH_ISSUER: must be set/],
    ['no audience', { GATEHOUSE_AUTH_AUDIENCE: undefined }, /GATEHOUSE_AUTH_AUDIENCE: must be set/],
    ['no algorithm list', { GATEHOUSE_AUTH_ALGORITHMS: undefined }, /GATEHOUSE_AUTH_ALGORITHMS: must be set/],
    ['HS256 in the algorithm list', { GATEHOUSE_AUTH_ALGORITHMS: 'RS256,HS256' }, /HS256 not allowed in production/],
  ])('refuses %s', (_name, change, expected) => {
    expect(refusal({ ...GOOD_PRODUCTION, ...change })).toMatch(expected);
  });

  it('lists every problem at once', () => {
    const message = refusal({
      GATEHOUSE_ENV: 'production',
      GATEHOUSE_AUDIT_HMAC_KEY: 'x'.repeat(20),
      GATEHOUSE_AUTH_ALGORITHMS: 'HS256',
    });
    for (const line of [/AUDIT_HMAC_KEY: too weak/, /JWKS_URL: must be set/, /ISSUER/, /AUDIENCE/, /HS256 not allowed/])
      expect(message).toMatch(line);
  });

  it('local and test keep the local defaults', () => {
    expect(refusal({ GATEHOUSE_ENV: 'local' })).toBe('');
    expect(refusal({ GATEHOUSE_ENV: 'test' })).toBe('');
  });
});
