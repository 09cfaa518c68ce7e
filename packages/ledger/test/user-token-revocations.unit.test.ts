import { describe, expect, it } from 'vitest';
import { revokedBecause } from '../src/user-token-revocations.ts';

// The one comparison of a token against its subject's revocations
// (docs/decisions/0695-user-tokens-can-be-revoked.md): the jti, or `iat` before the not-before.
describe('revokedBecause', () => {
  const none = { notBeforeS: null, jtiRevoked: false };
  it('a token of a subject without revocations is not revoked, with or without iat', () => {
    expect(revokedBecause({ sub: 'u', iat: 100 }, none)).toBeNull();
    expect(revokedBecause({ sub: 'u' }, none)).toBeNull();
  });
  it('a token issued before the not-before is revoked; at or after it, not', () => {
    const nb = { notBeforeS: 100, jtiRevoked: false };
    expect(revokedBecause({ sub: 'u', iat: 99 }, nb)).toBe('subject');
    expect(revokedBecause({ sub: 'u', iat: 100 }, nb)).toBeNull();
    expect(revokedBecause({ sub: 'u', iat: 101 }, nb)).toBeNull();
  });
  it('a token without iat under a not-before is revoked (it cannot show it came after)', () => {
    expect(revokedBecause({ sub: 'u' }, { notBeforeS: 100, jtiRevoked: false })).toBe('subject');
  });
  it('a revoked jti is revoked whatever its iat', () => {
    expect(revokedBecause({ sub: 'u', iat: 200, jti: 'j' }, { notBeforeS: 100, jtiRevoked: true })).toBe('jti');
    expect(revokedBecause({ sub: 'u', iat: 200, jti: 'j' }, { notBeforeS: null, jtiRevoked: true })).toBe('jti');
  });
});
