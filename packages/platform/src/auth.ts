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
 * Express middleware: requires `Authorization: Bearer <JWT>` and verifies it.
 * Responds 401 (`missing_token` / `invalid_token`) otherwise.
 */
export function requireUser(verifier: BearerVerifier) {
  return async (req: Request, _res: Response, next: NextFunction): Promise<void> => {
    const header = req.header('authorization') ?? '';
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match?.[1]) return next(new Unauthorized('missing_token', 'a bearer token is required'));
    try {
      (req as unknown as AuthedRequest).user = await verifyBearerToken(match[1], verifier);
      next();
    } catch (err) {
      next(err); // an InvalidTokenError is Unauthorized (`invalid_token`): 401 by the error middleware
    }
  };
}
