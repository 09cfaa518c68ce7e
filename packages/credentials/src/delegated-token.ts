import { createHash, randomUUID, type KeyObject } from 'node:crypto';
import { SignJWT, jwtVerify, errors, type JWTVerifyGetKey } from 'jose';
import { z } from 'zod';
import { Forbidden } from '@gatehouse/contracts';

export type { JWTVerifyGetKey } from 'jose';

/** Issuer of delegated downstream credentials. */
export const DELEGATION_ISSUER = 'gatehouse-executor';

/** Lifetime of a delegated token: 60 s (docs/product/policy-rules.md#delegated-credentials). */
export const DELEGATED_TOKEN_TTL_SECONDS = 60;

/** The only signature algorithm of delegated tokens: EdDSA over Ed25519 (RFC 8037). */
export const DELEGATION_ALG = 'EdDSA';

/**
 * Claims of a delegated credential, following RFC 8693 delegation semantics: `sub` is the user
 * on whose behalf the call is made, `act.sub` the agent acting, `aud` one downstream service,
 * `scope` one operation. `ceiling` is the user's refund ceiling in integer cents; `epoch` the
 * revocation epoch at minting (raising the epoch invalidates every outstanding token). The token
 * binds one request (docs/decisions/0170-delegated-credentials-bind-the-operation.md): `op` is
 * its idempotency (operation) key, `fence` the fencing token of the lease that minted it, `dig`
 * the {@link bindingDigest} of its target and amount, `jti` a single-use id.
 */
export const DelegatedClaimsSchema = z.object({
  sub: z.string(),
  act: z.object({ sub: z.string() }),
  aud: z.string(),
  scope: z.string(),
  tenant: z.string(),
  ceiling: z.number().int().nonnegative(),
  epoch: z.number().int().nonnegative(),
  /** Idempotency / operation key this token was minted for. */
  op: z.string().min(1),
  /** Fencing token of the lease that minted it. */
  fence: z.number().int().nonnegative(),
  /** sha256 (hex) of the canonical JSON of the request's target and amount ({@link bindingDigest}). */
  dig: z.string().regex(/^[0-9a-f]{64}$/),
  /** Single-use token id (a UUID): the system of record accepts it once. */
  jti: z.string().min(1).max(64),
  /** Expiry, seconds since the epoch (set by {@link mintDelegatedToken}). */
  exp: z.number().int(),
});
export type DelegatedClaims = z.infer<typeof DelegatedClaimsSchema>;

/** What the minter supplies: every claim but those {@link mintDelegatedToken} sets itself. */
export type DelegationGrant = Omit<DelegatedClaims, 'dig' | 'jti' | 'exp'> & {
  /** The request's target and amount, hashed into `dig` (see {@link bindingDigest}). */
  target: BindingTarget;
};

/** The fields of one request a token is bound to: flat, strings, integers or null. */
export type BindingTarget = Record<string, string | number | null>;

/**
 * Digest binding a token to one request: sha256 (hex) over the canonical JSON (keys sorted, no
 * whitespace — RFC 8785 for flat objects of strings and integers) of `{scope, ...target}`. The
 * minter hashes what it is about to send; the system of record hashes what it received.
 */
export function bindingDigest(scope: string, target: BindingTarget): string {
  const all: BindingTarget = { ...target, scope };
  const canonical = `{${Object.keys(all)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${JSON.stringify(all[k])}`)
    .join(',')}}`;
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * Thrown by {@link verifyDelegatedToken} (and the systems of record's binding checks) with a
 * machine-readable `reason`: 403, except a token that does not verify (`invalid_token…`), 401 —
 * decided by the platform's one status table.
 */
export class DelegationRejected extends Forbidden {
  constructor(reason: string) {
    super(reason, `delegated token rejected: ${reason}`);
  }
}

/** The minting side's signing key: an Ed25519 private key and its `kid` (see `signing-keys.ts`). */
export interface DelegationSigningKey {
  key: KeyObject;
  kid: string;
}

/**
 * Mints a fresh delegated token: EdDSA (Ed25519) with the key's `kid` in the header, lifetime
 * {@link DELEGATED_TOKEN_TTL_SECONDS} from `nowMs` (epoch ms, default the clock), a new random
 * `jti`, and `dig` computed from `grant.target`. Mint one per attempt: the system of record
 * accepts a `jti` once.
 */
export async function mintDelegatedToken(grant: DelegationGrant, signing: DelegationSigningKey, nowMs = Date.now()): Promise<string> {
  const { sub, aud, target, ...rest } = grant;
  const iat = Math.floor(nowMs / 1000);
  return new SignJWT({ ...rest, dig: bindingDigest(grant.scope, target) })
    .setProtectedHeader({ alg: DELEGATION_ALG, typ: 'JWT', kid: signing.kid })
    .setIssuer(DELEGATION_ISSUER)
    .setSubject(sub)
    .setAudience(aud)
    .setJti(randomUUID())
    .setIssuedAt(iat)
    .setExpirationTime(iat + DELEGATED_TOKEN_TTL_SECONDS)
    .sign(signing.key);
}

/**
 * Verifies a delegated token's signature (EdDSA only, a key of `opts.keys` chosen by `kid`),
 * issuer, expiry and claims, for one downstream (`audience`) and one operation (`scope`).
 * The request binding (`op`, `dig`, `fence`, `jti`) is the caller's to check against the
 * request; see the staging delegation guard.
 * @throws DelegationRejected with reason `invalid_token:<jose code>` (bad signature, unknown
 *   key, other algorithm, expired…), `invalid_token:claims`, `wrong_audience`, `wrong_scope`,
 *   `revoked_epoch` (token epoch below `minEpoch`).
 */
export async function verifyDelegatedToken(
  token: string,
  opts: { keys: JWTVerifyGetKey; audience: string; scope: string; minEpoch: number },
): Promise<DelegatedClaims> {
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(token, opts.keys, { algorithms: [DELEGATION_ALG], issuer: DELEGATION_ISSUER }));
  } catch (err) {
    throw new DelegationRejected(err instanceof errors.JOSEError ? `invalid_token:${err.code}` : 'invalid_token');
  }
  const parsed = DelegatedClaimsSchema.safeParse(payload);
  if (!parsed.success) throw new DelegationRejected('invalid_token:claims');
  const claims = parsed.data;
  if (claims.aud !== opts.audience) throw new DelegationRejected('wrong_audience');
  if (claims.scope !== opts.scope) throw new DelegationRejected('wrong_scope');
  assertEpochCurrent(claims.epoch, opts.minEpoch);
  return claims;
}

/**
 * The revocation rule (docs/product/policy-rules.md#delegated-credentials): a token minted with
 * an epoch below the one in force is dead. The one comparison, used when a token is verified and
 * again when a system of record commits its effect (staging's epoch fence, ADR 0685).
 * @param tokenEpoch the token's `epoch` claim; @param currentEpoch the epoch in force.
 * @throws DelegationRejected(`revoked_epoch`, 403) when `tokenEpoch` < `currentEpoch`.
 */
export function assertEpochCurrent(tokenEpoch: number, currentEpoch: number): void {
  if (tokenEpoch < currentEpoch) throw new DelegationRejected('revoked_epoch');
}
