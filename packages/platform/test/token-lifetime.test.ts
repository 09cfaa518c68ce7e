import { describe, expect, it } from 'vitest';
import request from 'supertest';
import { decodeJwt, SignJWT } from 'jose';
import { DEFAULT_USER_TOKEN_TTL_S, signUserToken, USER_TOKEN_ISSUER } from '@gatehouse/credentials';
import { createHttpApp, createLogger, finishApp, requireUser, userTokenVerifier, type BearerVerifier } from '../src/index.ts';

// Every user bearer token expires (docs/decisions/0688-every-bearer-token-expires.md): a local
// HS256 token without `exp`, or one living longer than GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S, is
// 401 invalid_token naming why, and the route behind the check never runs. Every token the
// project mints (signUserToken: CLI `token`, demo, sign-in chooser, test helpers) carries `exp`.

const SECRET = 'token-lifetime-test-secret-0123456789';
const CLAIMS = { sub: 'rep-ana', tenant: 'quillfeather', roles: ['rep'] };
const nowS = (): number => Math.floor(Date.now() / 1000);

/** An app whose one route counts the calls that got past the token check. */
function appWith(verifier: BearerVerifier) {
  const app = createHttpApp('token-lifetime-test');
  const reached = { count: 0 };
  app.get('/v1/me', requireUser(verifier), (req, res) => {
    reached.count += 1;
    res.json({ exp: (req as unknown as { user: { exp: number } }).user.exp });
  });
  return { app: finishApp(app, createLogger('token-lifetime-test', { write: () => true } as never)), reached };
}

/** An HS256 token of the local issuer with exactly the registered claims given. */
async function handMade(claims: { iat?: number; exp?: number }): Promise<string> {
  const jwt = new SignJWT({ tenant: CLAIMS.tenant, roles: CLAIMS.roles })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(CLAIMS.sub)
    .setIssuer(USER_TOKEN_ISSUER);
  if (claims.iat !== undefined) jwt.setIssuedAt(claims.iat);
  if (claims.exp !== undefined) jwt.setExpirationTime(claims.exp);
  return jwt.sign(new TextEncoder().encode(SECRET));
}

describe('local bearer tokens expire', () => {
  const verifier = userTokenVerifier({ GATEHOUSE_AUTH_SECRET: SECRET, GATEHOUSE_AUTH_ALGORITHMS: undefined });

  it.each([
    ['no exp', { iat: nowS() }, /no exp/],
    ['no exp and no iat', {}, /no exp/],
    ['a lifetime of two days', { iat: nowS(), exp: nowS() + 2 * 86_400 }, /lifetime 172800 s is longer than the 86400 s/],
    ['a future iat stretching the window', { iat: nowS() + 30 * 86_400, exp: nowS() + 30 * 86_400 + 60 }, /lifetime .* is longer/],
  ])('refuses a token with %s: 401 invalid_token naming why, the route never runs', async (_name, claims, message) => {
    const { app, reached } = appWith(verifier);
    const res = await request(app)
      .get('/v1/me')
      .set('authorization', `Bearer ${await handMade(claims)}`);
    expect(res.status).toBe(401);
    expect(res.body.error.reason).toBe('invalid_token');
    expect(res.body.error.message).toMatch(message);
    expect(reached.count).toBe(0);
  });

  it('accepts a token the project mints, which carries iat and exp an hour apart, and hands the route its exp', async () => {
    const { app, reached } = appWith(verifier);
    const token = await signUserToken(CLAIMS, SECRET);
    const { iat, exp } = decodeJwt(token);
    expect(exp! - iat!).toBe(DEFAULT_USER_TOKEN_TTL_S);
    const res = await request(app).get('/v1/me').set('authorization', `Bearer ${token}`);
    expect(res.status).toBe(200);
    expect(res.body.exp).toBe(exp);
    expect(reached.count).toBe(1);
  });

  it('the maximum is configured (GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S)', async () => {
    const { app, reached } = appWith(
      userTokenVerifier({ GATEHOUSE_AUTH_SECRET: SECRET, GATEHOUSE_AUTH_ALGORITHMS: undefined, GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S: 600 }),
    );
    const hour = await request(app)
      .get('/v1/me')
      .set('authorization', `Bearer ${await signUserToken(CLAIMS, SECRET)}`);
    expect(hour.status).toBe(401);
    expect(hour.body.error.message).toMatch(/longer than the 600 s/);
    expect(reached.count).toBe(0);
    const tenMinutes = await request(app)
      .get('/v1/me')
      .set('authorization', `Bearer ${await signUserToken(CLAIMS, SECRET, 600)}`);
    expect(tenMinutes.status).toBe(200);
  });

  it('signUserToken refuses to mint a token that would not expire', async () => {
    for (const ttl of [0, -1, Number.POSITIVE_INFINITY, 1.5]) await expect(signUserToken(CLAIMS, SECRET, ttl)).rejects.toThrow(RangeError);
  });
});
