import { createHmac, generateKeyPairSync, sign } from 'node:crypto';
import fc from 'fast-check';
import { loadWorld } from '@gatehouse/contracts';
// @gatehouse/credentials is not a dependency of the test package; imported by path (the same module).
import { USER_TOKEN_ISSUER } from '../../../packages/credentials/src/index.ts';
import { SECRET } from './apps.ts';

const b64 = (v: unknown): string => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
const nowS = (): number => Math.floor(Date.now() / 1000);
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;

/** How a forged token is signed: the right secret, another secret, another algorithm, or not at all. */
type Signing = 'hs256' | 'other-secret' | 'hs512' | 'rs256' | 'none' | 'flipped';

/**
 * A compact JWS over `header` and `payload`, signed the way `signing` says. Built by hand (not with
 * jose) so nothing refuses to produce a malformed or mismatched token.
 */
export function forgeToken(header: Record<string, unknown>, payload: unknown, signing: Signing): string {
  const input = `${b64(header)}.${b64(payload)}`;
  const hmac = (alg: 'sha256' | 'sha512', key: string) => createHmac(alg, key).update(input).digest('base64url');
  switch (signing) {
    case 'hs256':
      return `${input}.${hmac('sha256', SECRET)}`;
    case 'other-secret':
      return `${input}.${hmac('sha256', 'not-the-local-secret-at-all')}`;
    case 'hs512':
      return `${input}.${hmac('sha512', SECRET)}`;
    case 'rs256':
      return `${input}.${sign('sha256', Buffer.from(input), rsa).toString('base64url')}`;
    case 'none':
      return `${input}.`;
    case 'flipped': {
      const sig = hmac('sha256', SECRET);
      return `${input}.${sig.slice(0, -2)}${sig.endsWith('AA') ? 'BB' : 'AA'}`;
    }
  }
}

/** Claims of a world user as the local issuer writes them, valid for an hour. */
function claimsOf(userId: string): Record<string, unknown> {
  const u = loadWorld().users.find((x) => x.id === userId)!;
  return { sub: u.id, tenant: u.tenant, roles: [u.role], iss: USER_TOKEN_ISSUER, iat: nowS(), exp: nowS() + 3600 };
}

const userIds = (): string[] => loadWorld().users.map((u) => u.id);

/** A claim value a forger might put where a string is expected. */
const oddValue = fc.oneof(
  fc.constant(''),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('quillfeather\u0000', '\u0000', 'lead-eli\u0000', 'operator\u0000', '\ud800', 'x\udfffy', 'northwind'),
  fc.string({ minLength: 2000, maxLength: 4000 }),
  fc.integer(),
  fc.constant(null),
  fc.array(fc.string(), { maxLength: 3 }),
  fc.dictionary(fc.string(), fc.string(), { maxKeys: 2 }),
);

/** Claims of a real user with one part broken: expired, not yet valid, other issuer, odd sub/tenant/roles, missing. */
const brokenClaims = fc
  .tuple(
    fc.constantFrom(...userIds()),
    fc.constantFrom('exp', 'nbf', 'iss', 'tenant', 'sub', 'roles', 'role', 'no-tenant', 'odd-exp'),
    oddValue,
  )
  .map(([id, which, odd]) => {
    const c = claimsOf(id);
    if (which === 'exp') c.exp = nowS() - 60;
    else if (which === 'nbf') c.nbf = nowS() + 3600;
    else if (which === 'iss') c.iss = 'someone-else';
    else if (which === 'tenant') c.tenant = odd;
    else if (which === 'sub') c.sub = odd;
    else if (which === 'roles') c.roles = odd;
    else if (which === 'role') c.roles = [odd];
    else if (which === 'no-tenant') delete c.tenant;
    else c.exp = odd;
    return c;
  });

/** A JOSE header: the right one, another alg, alg none, odd types, a `kid`/`jku` pointing elsewhere. */
const header = fc.oneof(
  fc.constant({ alg: 'HS256', typ: 'JWT' }),
  fc.constantFrom('none', 'None', 'HS512', 'RS256', 'ES256', 'PS256', '', 'hs256').map((alg) => ({ alg, typ: 'JWT' })),
  fc.constant({ alg: 'HS256', crit: ['exp'] }),
  fc.constant({ alg: 'HS256', jku: 'http://127.0.0.1:1/jwks', kid: '../../etc/passwd' }),
  fc.constant({ alg: 'HS256', b64: false, crit: ['b64'] }),
  fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 3 }),
);

/** Text that is not a JWT at all: garbage base64, missing or extra parts, huge, non-ASCII. */
const garbage = fc.oneof(
  fc.constant(''),
  fc.constantFrom('a', 'a.b', '..', '...', 'a.b.c.d', 'e30.e30.', 'e30.e30.e30', '%%%.%%%.%%%'),
  fc.stringMatching(/^[A-Za-z0-9_=+/-]{0,60}\.[A-Za-z0-9_=+/-]{0,60}\.[A-Za-z0-9_=+/-]{0,60}$/),
  // Printable ASCII but space: what fits in a header value after `Bearer `.
  fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 }),
  fc.integer({ min: 5_000, max: 12_000 }).map((n) => `${b64({ alg: 'HS256' })}.${'A'.repeat(n)}.${'B'.repeat(43)}`),
  fc.constant(`${'x'.repeat(40_000)}`),
);

/** A bearer token: valid for a world user, forged or malformed (see the arbitraries above). */
export const tokenArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom(...userIds()).map((id) => forgeToken({ alg: 'HS256', typ: 'JWT' }, claimsOf(id), 'hs256')) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom(...userIds()), fc.constantFrom<Signing>('other-secret', 'hs512', 'rs256', 'none', 'flipped'), header)
      .map(([id, signing, h]) => forgeToken(h, claimsOf(id), signing)),
  },
  { weight: 3, arbitrary: brokenClaims.map((c) => forgeToken({ alg: 'HS256', typ: 'JWT' }, c, 'hs256')) },
  { weight: 1, arbitrary: fc.jsonValue().map((p) => forgeToken({ alg: 'HS256', typ: 'JWT' }, p, 'hs256')) },
  { weight: 2, arbitrary: garbage },
);

/** A token of `userId` from the local issuer (the happy path, for seeding and follow-ups). */
export function validToken(userId: string): string {
  return forgeToken({ alg: 'HS256', typ: 'JWT' }, claimsOf(userId), 'hs256');
}
