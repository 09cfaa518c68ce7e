import type { NextFunction, Request, Response } from 'express';
import type { VerifiedUserClaims } from '@gatehouse/credentials';
import { verifyBearerToken, type BearerVerifier } from './user-token.ts';
import { Unauthorized } from './errors.ts';

/**
 * Request with the verified caller; identity and tenant come only from the bearer token, and
 * `user.exp` is the token's expiry (seconds since the epoch; a long-lived answer such as an event
 * stream ends there, docs/decisions/0688-every-bearer-token-expires.md).
 */
export type AuthedRequest = Request & { user: VerifiedUserClaims };

/**
 * The bearer token of an `Authorization` header value (RFC 6750 §2.1): `Bearer` in any case, then
 * whitespace, then one token and nothing after it. Returns undefined when the header is absent or
 * blank (the caller answers `missing_token`). The refusal never repeats the header's value.
 * @throws Unauthorized(`malformed_authorization`, 401) when the header is present in any other
 * form — another scheme, no token, or more than one word after `Bearer`
 * (docs/decisions/0747-a-malformed-authorization-header-has-its-own-reason.md).
 */
export function bearerTokenOf(header: string | undefined): string | undefined {
  const value = header?.trim() ?? '';
  if (!value) return undefined;
  const [scheme = '', ...rest] = value.split(/\s+/);
  const problem =
    scheme.toLowerCase() !== 'bearer'
      ? rest.length
        ? 'its scheme is not Bearer'
        : 'it has no scheme (send the token after "Bearer ")'
      : rest.length === 0
        ? 'it has no token after Bearer'
        : rest.length > 1
          ? `it has ${rest.length} words after Bearer, not one token`
          : null;
  if (problem) throw new Unauthorized('malformed_authorization', `the Authorization header must be "Bearer <token>": ${problem}`);
  return rest[0];
}

/**
 * Express middleware: requires `Authorization: Bearer <JWT>` and verifies it.
 * Responds 401 (`missing_token` / `malformed_authorization` ({@link bearerTokenOf}) /
 * `invalid_token`) otherwise.
 */
export function requireUser(verifier: BearerVerifier) {
  return async (req: Request, _res: Response, next: NextFunction): Promise<void> => {
    try {
      const token = bearerTokenOf(req.header('authorization'));
      if (!token) return next(new Unauthorized('missing_token', 'a bearer token is required'));
      (req as unknown as AuthedRequest).user = await verifyBearerToken(token, verifier);
      next();
    } catch (err) {
      next(err); // Unauthorized (`malformed_authorization`, `invalid_token`…): 401 by the error middleware
    }
  };
}
