import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from 'jose';
import { InvalidTokenError, signUserToken } from '@gatehouse/credentials';
import { userTokenVerifier, verifyBearerToken, type BearerVerifier } from '../src/index.ts';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// JWKS mode (production): a user token must carry iss, aud, exp and sub, match the configured
// issuer and audience, and use an allowed algorithm (docs/decisions/0180-strict-production-mode.md).
let server: Server;
let es256: CryptoKey;
let eddsa: CryptoKey;
let verifier: BearerVerifier;
const ISSUER = 'https://idp.test/';
const AUDIENCE = 'gatehouse';

beforeAll(async () => {
  const a = await generateKeyPair('ES256');
  const b = await generateKeyPair('EdDSA');
  es256 = a.privateKey;
  eddsa = b.privateKey;
  const keys = [
    { ...(await exportJWK(a.publicKey)), kid: 'es', alg: 'ES256' },
    { ...(await exportJWK(b.publicKey)), kid: 'ed', alg: 'EdDSA' },
  ];
  server = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ keys }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  verifier = userTokenVerifier({
    GATEHOUSE_AUTH_SECRET: 'unused-local-secret',
    GATEHOUSE_AUTH_JWKS_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
    GATEHOUSE_AUTH_ISSUER: ISSUER,
    GATEHOUSE_AUTH_AUDIENCE: AUDIENCE,
    GATEHOUSE_AUTH_ALGORITHMS: ['ES256'],
  });
});
afterAll(() => server?.close());
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_DISABLE_TOKEN_CLAIM_CHECKS;
  resetTestFaultsForTests();
});

/** A token with the given registered claims (undefined: left out) and the private claims Gatehouse reads. */
async function token(
  claims: { iss?: string; aud?: string; sub?: string; exp?: number },
  alg: 'ES256' | 'EdDSA' = 'ES256',
): Promise<string> {
  const payload: JWTPayload = { tenant: 'quillfeather', roles: ['rep'], ...claims };
  return new SignJWT(payload)
    .setProtectedHeader({ alg, kid: alg === 'ES256' ? 'es' : 'ed' })
    .setIssuedAt()
    .sign(alg === 'ES256' ? es256 : eddsa);
}
const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;
const good = () => ({ iss: ISSUER, aud: AUDIENCE, sub: 'rep-ana', exp: inAnHour() });

describe('user tokens in JWKS mode', () => {
  it('accepts a token with the configured issuer, audience and algorithm', async () => {
    expect(await verifyBearerToken(await token(good()), verifier)).toMatchObject({ sub: 'rep-ana', tenant: 'quillfeather' });
  });

  it.each([
    ['no aud', { aud: undefined }, /claim aud/],
    ['another aud', { aud: 'someone-else' }, /claim aud/],
    ['no iss', { iss: undefined }, /claim iss/],
    ['another iss', { iss: 'https://evil.test/' }, /claim iss/],
    ['no exp', { exp: undefined }, /claim exp/],
    ['no sub', { sub: undefined }, /claim sub/],
    ['an expired exp', { exp: Math.floor(Date.now() / 1000) - 120 }, /expired/],
    ['a lifetime past the maximum (24 h by default, ADR 0688)', { exp: Math.floor(Date.now() / 1000) + 40 * 86_400 }, /lifetime .* longer/],
  ])('refuses %s', async (_name, change, reason) => {
    const t = await token({ ...good(), ...change });
    await expect(verifyBearerToken(t, verifier)).rejects.toThrow(InvalidTokenError);
    await expect(verifyBearerToken(t, verifier)).rejects.toThrow(reason);
  });

  it('refuses an algorithm outside the list, even signed by a key of the JWKS', async () => {
    await expect(verifyBearerToken(await token(good(), 'EdDSA'), verifier)).rejects.toThrow(/algorithm not allowed/);
  });

  it('refuses a local HS256 token', async () => {
    const hs = await signUserToken({ sub: 'rep-ana', tenant: 'quillfeather', roles: ['rep'] }, 'unused-local-secret');
    await expect(verifyBearerToken(hs, verifier)).rejects.toThrow(InvalidTokenError);
  });

  it('a JWKS URL without issuer, audience or algorithms is a configuration error', () => {
    expect(() =>
      userTokenVerifier({
        GATEHOUSE_AUTH_SECRET: 'x',
        GATEHOUSE_AUTH_JWKS_URL: 'https://idp.test/jwks',
        GATEHOUSE_AUTH_ISSUER: ISSUER,
        GATEHOUSE_AUTH_ALGORITHMS: ['ES256'],
      }),
    ).toThrow(/GATEHOUSE_AUTH_AUDIENCE/);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_TOKEN_CLAIM_CHECKS): a token without aud and exp gets in', async () => {
    process.env.GATEHOUSE_TEST_DISABLE_TOKEN_CLAIM_CHECKS = '1';
    resetTestFaultsForTests();
    const saved = process.env.GATEHOUSE_ENV;
    process.env.GATEHOUSE_ENV = 'local';
    resetTestFaultsForTests();
    try {
      await expect(verifyBearerToken(await token({ ...good(), aud: undefined }), verifier)).rejects.toThrow(/GATEHOUSE_ENV=test/);
      process.env.GATEHOUSE_ENV = 'test';
      resetTestFaultsForTests();
      expect(await verifyBearerToken(await token({ iss: ISSUER, sub: 'rep-ana' }), verifier)).toMatchObject({ sub: 'rep-ana' });
    } finally {
      process.env.GATEHOUSE_ENV = saved;
      resetTestFaultsForTests();
    }
  });
});
