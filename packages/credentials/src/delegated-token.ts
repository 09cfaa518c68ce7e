import { SignJWT, jwtVerify, errors } from 'jose';
import { z } from 'zod';

/** Issuer of delegated downstream credentials. */
export const DELEGATION_ISSUER = 'gatehouse-executor';

/** Lifetime of a delegated token: 60 s (docs/product/policy-rules.md#delegated-credentials). */
export const DELEGATED_TOKEN_TTL_SECONDS = 60;

/**
 * Claims of a delegated credential, following RFC 8693 delegation semantics: `sub` is the user
 * on whose behalf the call is made, `act.sub` the agent acting, `aud` one downstream service,
 * `scope` one operation. `ceiling` is the user's refund ceiling in integer cents; `epoch` the
 * revocation epoch at minting (raising the epoch invalidates every outstanding token).
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
  op: z.string(),
  /** Fencing token of the lease that minted it. */
  fence: z.number().int().nonnegative(),
});
export type DelegatedClaims = z.infer<typeof DelegatedClaimsSchema>;

/** Thrown by {@link verifyDelegatedToken} with a machine-readable `reason`. */
export class DelegationRejected extends Error {
  override name = 'DelegationRejected';
  readonly reason: string;
  constructor(reason: string) {
    super(`delegated token rejected: ${reason}`);
    this.reason = reason;
  }
}

/** Mints a fresh delegated token (HS256, {@link DELEGATED_TOKEN_TTL_SECONDS}). */
export async function mintDelegatedToken(claims: DelegatedClaims, secret: string): Promise<string> {
  const { sub, aud, ...rest } = claims;
  return new SignJWT(rest)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(DELEGATION_ISSUER)
    .setSubject(sub)
    .setAudience(aud)
    .setIssuedAt()
    .setExpirationTime(`${DELEGATED_TOKEN_TTL_SECONDS}s`)
    .sign(new TextEncoder().encode(secret));
}

/**
 * Verifies a delegated token for one downstream (`audience`) and one operation (`scope`).
 * @throws DelegationRejected with reason `invalid_token`, `wrong_audience`, `wrong_scope`,
 *   `revoked_epoch` (token epoch below `minEpoch`).
 */
export async function verifyDelegatedToken(
  token: string,
  opts: { secret: string; audience: string; scope: string; minEpoch: number },
): Promise<DelegatedClaims> {
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(token, new TextEncoder().encode(opts.secret), {
      algorithms: ['HS256'],
      issuer: DELEGATION_ISSUER,
    }));
  } catch (err) {
    throw new DelegationRejected(err instanceof errors.JOSEError ? `invalid_token:${err.code}` : 'invalid_token');
  }
  const parsed = DelegatedClaimsSchema.safeParse(payload);
  if (!parsed.success) throw new DelegationRejected('invalid_token:claims');
  const claims = parsed.data;
  if (claims.aud !== opts.audience) throw new DelegationRejected('wrong_audience');
  if (claims.scope !== opts.scope) throw new DelegationRejected('wrong_scope');
  if (claims.epoch < opts.minEpoch) throw new DelegationRejected('revoked_epoch');
  return claims;
}
