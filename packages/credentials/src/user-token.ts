import { SignJWT, jwtVerify, createRemoteJWKSet, errors, type JWTVerifyGetKey } from 'jose';
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

/** Thrown when a bearer token is missing, malformed, expired or signed by someone else (Unauthorized, `invalid_token`). */
export class InvalidTokenError extends Unauthorized {
  constructor(message: string, options?: GatehouseErrorOptions) {
    super('invalid_token', message, options);
  }
}

/**
 * Signs a user bearer token (HS256 with the local secret). For local use and tests only;
 * production verifies tokens from the identity provider's JWKS.
 * @param ttlSeconds lifetime in seconds (default 3600).
 */
export async function signUserToken(claims: UserClaims, secret: string, ttlSeconds = 3600): Promise<string> {
  return new SignJWT({ tenant: claims.tenant, roles: claims.roles })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuer(USER_TOKEN_ISSUER)
    .setIssuedAt()
    .setExpirationTime(`${ttlSeconds}s`)
    .sign(new TextEncoder().encode(secret));
}

/** Verification source: the local HS256 secret, or a JWKS URL (production). */
export type UserTokenVerifier = { secret: string } | { jwksUrl: string; issuer?: string };

const jwksCache = new Map<string, JWTVerifyGetKey>();

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
 * Verifies a bearer token and returns its claims.
 * @throws InvalidTokenError for any signature, expiry, issuer or claim problem.
 */
export async function verifyUserToken(token: string, verifier: UserTokenVerifier): Promise<UserClaims> {
  try {
    let payload: unknown;
    if ('secret' in verifier) {
      ({ payload } = await jwtVerify(token, new TextEncoder().encode(verifier.secret), {
        algorithms: ['HS256'],
        issuer: USER_TOKEN_ISSUER,
      }));
    } else {
      let jwks = jwksCache.get(verifier.jwksUrl);
      if (!jwks) {
        jwks = createRemoteJWKSet(new URL(verifier.jwksUrl));
        jwksCache.set(verifier.jwksUrl, jwks);
      }
      ({ payload } = await jwtVerify(token, jwks, verifier.issuer ? { issuer: verifier.issuer } : {}));
    }
    const parsed = UserClaimsSchema.safeParse(payload);
    if (!parsed.success) throw new InvalidTokenError('token lacks sub or tenant, or a claim is not short, storable text');
    return parsed.data;
  } catch (err) {
    if (err instanceof InvalidTokenError) throw err;
    if (err instanceof errors.JOSEError) throw new InvalidTokenError(JOSE_REASONS[err.code] ?? 'invalid token');
    throw new InvalidTokenError('malformed token');
  }
}
