import type { NextFunction, Request, Response } from 'express';
import { InvalidTokenError, type UserClaims } from '@gatehouse/credentials';
import { verifyBearerToken, type BearerVerifier } from './user-token.ts';
import { UserError } from './errors.ts';

/** Request with the verified caller; identity and tenant come only from the bearer token. */
export type AuthedRequest = Request & { user: UserClaims };

/**
 * Express middleware: requires `Authorization: Bearer <JWT>` and verifies it.
 * Responds 401 (`missing_token` / `invalid_token`) otherwise.
 */
export function requireUser(verifier: BearerVerifier) {
  return async (req: Request, _res: Response, next: NextFunction): Promise<void> => {
    const header = req.header('authorization') ?? '';
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match?.[1]) return next(new UserError('missing_token', 'a bearer token is required', { status: 401 }));
    try {
      (req as unknown as AuthedRequest).user = await verifyBearerToken(match[1], verifier);
      next();
    } catch (err) {
      next(err instanceof InvalidTokenError ? new UserError('invalid_token', err.message, { status: 401 }) : err);
    }
  };
}
