import { randomUUID } from 'node:crypto';
import { SignJWT, jwtVerify, errors } from 'jose';
import { z } from 'zod';
import { storableString, Unauthorized, type GatehouseErrorOptions } from '@gatehouse/contracts';

/** Issuer of local user tokens. */
export const USER_TOKEN_ISSUER = 'gatehouse-local';

/** Longest `sub` or `tenant` claim accepted (characters): far above any identity provider's ids, far below what a ledger index holds. */
export const MAX_CLAIM_CHARS = 256;

/**
 * Claims Gatehouse reads from a user's bearer JWT. Identity and tenant come only from here. Each
 * is text the ledger can store (no NUL, no lone surrogate) and indexes (`sub` and `tenant` at most
 * {@link MAX_CLAIM_CHARS}, at most 64 roles of 128): the ledger filters and records by them, so a
 * token whose claims it could not store is not a valid token (401, never a 500).
 */
export const UserClaimsSchema = z.object({
  sub: storableString().min(1).max(MAX_CLAIM_CHARS),
  tenant: storableString().min(1).max(MAX_CLAIM_CHARS),
  roles: z.array(storableString().max(128)).max(64).default([]),
});
export type UserClaims = z.infer<typeof UserClaimsSchema>;

/**
 * Longest lifetime of a user bearer token accepted by default, seconds (24 h;
 * `GATEHOUSE_AUTH_MAX_TOKEN_LIFETIME_S`): `exp - iat` (or `exp - now` without `iat`) above it is
 * refused (docs/decisions/0688-every-bearer-token-expires.md). Tokens this project mints live
 * {@link DEFAULT_USER_TOKEN_TTL_S}.
 */
export const DEFAULT_MAX_TOKEN_LIFETIME_S = 86_400;

/** Lifetime of the user tokens this project mints (CLI `token`, demo, sign-in chooser, tests), seconds. */
export const DEFAULT_USER_TOKEN_TTL_S = 3600;

/**
 * Thrown when a bearer token is missing, malformed, expired or signed by someone else
 * (Unauthorized, reason `invalid_token`; a subclass may name a narrower reason).
 */
export class InvalidTokenError extends Unauthorized {
  constructor(message: string, options?: GatehouseErrorOptions & { reason?: string }) {
    super(options?.reason ?? 'invalid_token', message, options);
  }
}

/**
 * Thrown when a bearer token verifies but was revoked by an operator (Unauthorized, reason
 * `token_revoked`): its subject's tokens issued before a not-before, or its `jti`
 * (docs/decisions/0695-user-tokens-can-be-revoked.md). An {@link InvalidTokenError}, so every
 * caller that treats an invalid token (sign in again, refuse the command) treats it so too.
 */
export class TokenRevokedError extends InvalidTokenError {
  constructor(message: string) {
    super(message, { reason: 'token_revoked' });
  }
}

/**
 * Signs a user bearer token (HS256 with the local secret). For local use and tests only;
 * production verifies tokens from the identity provider's JWKS. Every token carries `iat` and
 * `exp` (a token without `exp` is refused, docs/decisions/0688-every-bearer-token-expires.md), and
 * a random `jti`, so one token can be revoked alone (docs/decisions/0695-user-tokens-can-be-revoked.md).
 * @param ttlSeconds lifetime in seconds (default {@link DEFAULT_USER_TOKEN_TTL_S}).
 * @throws RangeError when `ttlSeconds` is not a positive integer.
 */
export async function signUserToken(claims: UserClaims, secret: string, ttlSeconds = DEFAULT_USER_TOKEN_TTL_S): Promise<string> {
  if (!Number.isInteger(ttlSeconds) || ttlSeconds <= 0)
    throw new RangeError(`a user token's lifetime must be a positive whole number of seconds, not ${ttlSeconds}`);
  return new SignJWT({ tenant: claims.tenant, roles: claims.roles })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuer(USER_TOKEN_ISSUER)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime(`${ttlSeconds}s`)
    .sign(new TextEncoder().encode(secret));
}

/**
 * Verification source of {@link verifyUserToken}: the local HS256 secret. `maxLifetimeS`: the
 * longest lifetime accepted, seconds (default {@link DEFAULT_MAX_TOKEN_LIFETIME_S}). Identity
 * provider tokens (JWKS, with issuer, audience and algorithms) are verified by the platform's
 * `verifyBearerToken`, the one JWKS path.
 */
export type UserTokenVerifier = { secret: string; maxLifetimeS?: number };

/**
 * Verified claims: {@link UserClaims} plus the token's expiry (`exp`, seconds since the epoch),
 * which every accepted token carries, and its `iat` (seconds since the epoch) and `jti` when it
 * has them (what revocation judges by, docs/decisions/0695-user-tokens-can-be-revoked.md).
 */
export type VerifiedUserClaims = UserClaims & { exp: number; iat?: number; jti?: string };

/**
 * The `iat` and `jti` of a verified payload, when they are well-formed (a number; a non-empty
 * string of at most {@link MAX_CLAIM_CHARS}); absent otherwise.
 */
export function tokenIdOf(payload: { iat?: unknown; jti?: unknown }): { iat?: number; jti?: string } {
  const out: { iat?: number; jti?: string } = {};
  if (typeof payload.iat === 'number' && Number.isFinite(payload.iat)) out.iat = payload.iat;
  if (typeof payload.jti === 'string' && payload.jti.length > 0 && payload.jti.length <= MAX_CLAIM_CHARS) out.jti = payload.jti;
  return out;
}

/**
 * The lifetime rule of every user bearer token, local or JWKS (the one owner of the rule;
 * docs/decisions/0688-every-bearer-token-expires.md): `exp` must be a number, and the lifetime
 * `exp - iat` (`exp - now` when `iat` is absent or later than now) at most `maxLifetimeS` seconds. Signature, time
 * and issuer are checked by jose before this.
 * @returns the token's `exp` (seconds since the epoch).
 * @throws InvalidTokenError naming the problem (no `exp`, or a lifetime above the maximum).
 */
export function checkTokenLifetime(payload: { exp?: unknown; iat?: unknown }, maxLifetimeS = DEFAULT_MAX_TOKEN_LIFETIME_S): number {
  const { exp, iat } = payload;
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw new InvalidTokenError('token has no exp: every bearer token must expire');
  const now = Math.floor(Date.now() / 1000);
  // An `iat` in the future would stretch the window past the maximum: count from now at the latest.
  const from = typeof iat === 'number' && Number.isFinite(iat) ? Math.min(iat, now) : now;
  if (exp - from > maxLifetimeS)
    throw new InvalidTokenError(`token lifetime ${exp - from} s is longer than the ${maxLifetimeS} s accepted (exp - iat)`);
  return exp;
}

/** Plain words for jose's error codes (shown to API clients). */
const JOSE_REASONS: Record<string, string> = {
  ERR_JWS_INVALID: 'malformed token',
  ERR_JWT_INVALID: 'malformed token',
  ERR_JWS_SIGNATURE_VERIFICATION_FAILED: 'token signature does not verify',
  ERR_JWT_EXPIRED: 'token expired',
  ERR_JWT_CLAIM_VALIDATION_FAILED: 'token claims are not acceptable (issuer, audience or time)',
  ERR_JOSE_ALG_NOT_ALLOWED: 'token algorithm not allowed',
};

/**
 * Verifies a local (HS256) bearer token and returns its claims with its `exp`, `iat` and `jti`.
 * Revocation is not checked here (it needs the ledger): the platform's `verifyBearerToken` does.
 * @throws InvalidTokenError for any signature, expiry, issuer or claim problem, a token without
 * `exp` or one whose lifetime is above the maximum ({@link checkTokenLifetime}).
 */
export async function verifyUserToken(token: string, verifier: UserTokenVerifier): Promise<VerifiedUserClaims> {
  try {
    const { payload } = await jwtVerify(token, new TextEncoder().encode(verifier.secret), {
      algorithms: ['HS256'],
      issuer: USER_TOKEN_ISSUER,
    });
    const exp = checkTokenLifetime(payload, verifier.maxLifetimeS);
    const parsed = UserClaimsSchema.safeParse(payload);
    if (!parsed.success) throw new InvalidTokenError('token lacks sub or tenant, or a claim is not short, storable text');
    return { ...parsed.data, exp, ...tokenIdOf(payload) };
  } catch (err) {
    if (err instanceof InvalidTokenError) throw err;
    if (err instanceof errors.JOSEError) throw new InvalidTokenError(JOSE_REASONS[err.code] ?? 'invalid token');
    throw new InvalidTokenError('malformed token');
  }
}
