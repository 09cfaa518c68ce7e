import { createRemoteJWKSet, errors, jwtVerify, type JWTVerifyGetKey } from 'jose';
import {
  checkTokenLifetime,
  InvalidTokenError,
  tokenIdOf,
  UserClaimsSchema,
  verifyUserToken,
  type VerifiedUserClaims,
} from '@gatehouse/credentials';
import type { Db } from '@gatehouse/ledger';
import type { BaseEnv } from './env.ts';
import { testFaults } from '@gatehouse/contracts';
import { DEFAULT_REVOCATION_CACHE_MS, revocationCacheOf, type TokenRevocationCheck } from './token-revocations.ts';

/**
 * How user bearer tokens are verified: the local HS256 secret (local and test only), or an
 * identity provider's JWKS with the issuer, audience and algorithms every token must match
 * (production; docs/decisions/0180-strict-production-mode.md). `maxLifetimeS`: the longest token
 * lifetime accepted, seconds (`GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S`; default 24 h,
 * docs/decisions/0688-every-bearer-token-expires.md). `revocations`: the check of revoked tokens
 * (every app over a ledger adds it, {@link withRevocations}); `revocationCacheMs`: its staleness
 * bound, ms (`GATEHOUSE_AUTH_REVOCATION_CACHE_MS`, docs/decisions/0695-user-tokens-can-be-revoked.md).
 */
export type BearerVerifier = ({ secret: string } | { jwksUrl: string; issuer: string; audience: string; algorithms: string[] }) & {
  maxLifetimeS?: number;
  revocationCacheMs?: number;
  revocations?: TokenRevocationCheck;
};

/**
 * `verifier` with the revocation check of `db` ({@link revocationCacheOf}, bound
 * `verifier.revocationCacheMs`, default {@link DEFAULT_REVOCATION_CACHE_MS}); a verifier that has
 * one already is returned as it is. Every app and command that takes user tokens over a ledger
 * builds its verifier through this, so a revoked token is refused by each of them.
 */
export function withRevocations(verifier: BearerVerifier, db: Db): BearerVerifier & { revocations: TokenRevocationCheck } {
  if (verifier.revocations) return { ...verifier, revocations: verifier.revocations };
  return { ...verifier, revocations: revocationCacheOf(db, verifier.revocationCacheMs ?? DEFAULT_REVOCATION_CACHE_MS) };
}

/** Claims a JWKS-mode token must carry, checked by jose against the configuration (RFC 7519 §4.1). */
const REQUIRED_CLAIMS = ['iss', 'aud', 'exp', 'sub'];

const jwksCache = new Map<string, JWTVerifyGetKey>();

/**
 * The verifier of `env`: JWKS mode when `GATEHOUSE_AUTH_JWKS_URL` is set, else the local secret.
 * @throws Error when the JWKS URL is set without an issuer, an audience or an algorithm list.
 */
export function userTokenVerifier(
  env: Pick<
    BaseEnv,
    'GATEHOUSE_AUTH_JWKS_URL' | 'GATEHOUSE_AUTH_SECRET' | 'GATEHOUSE_AUTH_ISSUER' | 'GATEHOUSE_AUTH_AUDIENCE' | 'GATEHOUSE_AUTH_ALGORITHMS'
  > &
    Partial<Pick<BaseEnv, 'GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S' | 'GATEHOUSE_AUTH_REVOCATION_CACHE_MS'>>,
): BearerVerifier {
  const lifetime = {
    ...(env.GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S === undefined ? {} : { maxLifetimeS: env.GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S }),
    ...(env.GATEHOUSE_AUTH_REVOCATION_CACHE_MS === undefined ? {} : { revocationCacheMs: env.GATEHOUSE_AUTH_REVOCATION_CACHE_MS }),
  };
  if (!env.GATEHOUSE_AUTH_JWKS_URL) return { secret: env.GATEHOUSE_AUTH_SECRET, ...lifetime };
  const { GATEHOUSE_AUTH_ISSUER: issuer, GATEHOUSE_AUTH_AUDIENCE: audience, GATEHOUSE_AUTH_ALGORITHMS: algorithms } = env;
  if (!issuer || !audience || !algorithms?.length)
    throw new Error('GATEHOUSE_AUTH_JWKS_URL needs GATEHOUSE_AUTH_ISSUER, GATEHOUSE_AUTH_AUDIENCE and GATEHOUSE_AUTH_ALGORITHMS');
  return { jwksUrl: env.GATEHOUSE_AUTH_JWKS_URL, issuer, audience, algorithms, ...lifetime };
}

/**
 * Test-only switch `GATEHOUSE_TEST_DISABLE_TOKEN_CLAIM_CHECKS=1`: JWKS tokens are checked for
 * their signature only (control-removed test).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function claimChecksDisabled(): boolean {
  return testFaults().disableTokenClaimChecks;
}

/** `exp` of a token let in by the control-removed switch (signature only): a token without one never expires. */
function signatureOnlyExp(payload: unknown): number {
  const { exp } = payload as { exp?: unknown };
  return typeof exp === 'number' ? exp : Number.POSITIVE_INFINITY;
}

/**
 * Verifies a user bearer token and returns its claims with its `exp` (seconds since the epoch),
 * and `iat` and `jti` when it has them; then, when the verifier has a revocation check, refuses a
 * revoked token (docs/decisions/0695-user-tokens-can-be-revoked.md).
 * JWKS mode requires `iss`, `aud`, `exp` and `sub`, the configured issuer and audience, and one of
 * the configured algorithms; both modes refuse a token without `exp` or living longer than
 * `verifier.maxLifetimeS` (`checkTokenLifetime`, docs/decisions/0688-every-bearer-token-expires.md).
 * @throws InvalidTokenError for any signature, algorithm, expiry, lifetime, issuer, audience or claim problem.
 * @throws TokenRevokedError (an InvalidTokenError, reason `token_revoked`) for a revoked token.
 * @throws DependencyUnavailable when the revocations cannot be read (fail closed).
 */
export async function verifyBearerToken(token: string, verifier: BearerVerifier): Promise<VerifiedUserClaims> {
  const claims = await verifySignedToken(token, verifier);
  await verifier.revocations?.assertNotRevoked(claims);
  return claims;
}

/** Signature, claims and lifetime of `token` (the local secret, or the JWKS): {@link verifyBearerToken} without revocation. */
async function verifySignedToken(token: string, verifier: BearerVerifier): Promise<VerifiedUserClaims> {
  if ('secret' in verifier) return verifyUserToken(token, { secret: verifier.secret, maxLifetimeS: verifier.maxLifetimeS });
  let jwks = jwksCache.get(verifier.jwksUrl);
  if (!jwks) {
    jwks = createRemoteJWKSet(new URL(verifier.jwksUrl));
    jwksCache.set(verifier.jwksUrl, jwks);
  }
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(
      token,
      jwks,
      claimChecksDisabled()
        ? {}
        : { issuer: verifier.issuer, audience: verifier.audience, algorithms: verifier.algorithms, requiredClaims: REQUIRED_CLAIMS },
    ));
  } catch (err) {
    if (err instanceof errors.JWKSTimeout) throw err; // the JWKS did not answer: not the caller's fault
    if (err instanceof errors.JWTClaimValidationFailed)
      throw new InvalidTokenError(`token claim ${err.claim} is missing or not acceptable`);
    if (err instanceof errors.JWTExpired) throw new InvalidTokenError('token expired');
    if (err instanceof errors.JOSEAlgNotAllowed) throw new InvalidTokenError('token algorithm not allowed');
    if (err instanceof errors.JWKSNoMatchingKey || err instanceof errors.JWSSignatureVerificationFailed)
      throw new InvalidTokenError('token signature does not verify');
    if (err instanceof errors.JOSEError) throw new InvalidTokenError('malformed token');
    throw err; // the JWKS did not answer: not the caller's fault
  }
  const exp = claimChecksDisabled() ? signatureOnlyExp(payload) : checkTokenLifetime(payload as object, verifier.maxLifetimeS);
  const parsed = UserClaimsSchema.safeParse(payload);
  if (!parsed.success) throw new InvalidTokenError('token lacks sub or tenant, or a claim is not short, storable text');
  return { ...parsed.data, exp, ...tokenIdOf(payload as object) };
}
