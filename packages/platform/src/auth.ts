import type { NextFunction, Request, Response } from 'express';
import { verifyUserToken, InvalidTokenError, type UserClaims, type UserTokenVerifier } from '@gatehouse/credentials';
import type { BaseEnv } from './env.ts';

/** How bearer tokens are verified: the JWKS URL when configured (production), else the local HS256 secret. */
export function userTokenVerifier(env: Pick<BaseEnv, 'GATEHOUSE_AUTH_JWKS_URL' | 'GATEHOUSE_AUTH_SECRET'>): UserTokenVerifier {
  return env.GATEHOUSE_AUTH_JWKS_URL ? { jwksUrl: env.GATEHOUSE_AUTH_JWKS_URL } : { secret: env.GATEHOUSE_AUTH_SECRET };
}
import { UserError } from './errors.ts';

/** Request with the verified caller; identity and tenant come only from the bearer token. */
export type AuthedRequest = Request & { user: UserClaims };

/**
 * Express middleware: requires `Authorization: Bearer <JWT>` and verifies it.
 * Responds 401 (`missing_token` / `invalid_token`) otherwise.
 */
export function requireUser(verifier: UserTokenVerifier) {
  return async (req: Request, _res: Response, next: NextFunction): Promise<void> => {
    const header = req.header('authorization') ?? '';
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match?.[1]) return next(new UserError('missing_token', 'a bearer token is required', { status: 401 }));
    try {
      (req as unknown as AuthedRequest).user = await verifyUserToken(match[1], verifier);
      next();
    } catch (err) {
      next(err instanceof InvalidTokenError ? new UserError('invalid_token', err.message, { status: 401 }) : err);
    }
  };
}
