import { Router } from 'express';
import { PUBLISHED_JWKS_PATH, type JSONWebKeySet } from '@gatehouse/credentials';

/**
 * `GET /.well-known/jwks.json` → the JWKS (RFC 7517) the systems of record verify delegated tokens
 * with: public keys only, as read at start. Unauthenticated, as a JWKS is. The executor's
 * `delegationKey` readiness check compares its signing key's `kid` with it (ADR 0761).
 */
export function trustedKeysRouter(jwks: JSONWebKeySet): Router {
  const router = Router();
  const published = { keys: jwks.keys.map(({ kty, crv, x, kid, alg, use }) => ({ kty, crv, x, kid, alg, use })) };
  router.get(PUBLISHED_JWKS_PATH, (_req, res) => {
    res.set('cache-control', 'no-store').json(published);
  });
  return router;
}
