import { Router } from 'express';
import type { Db } from '@gatehouse/ledger';
import { revokeUserTokens } from '@gatehouse/operations';
import { Forbidden } from '@gatehouse/platform';
import { operatorOf } from './operator-auth.ts';

/**
 * `POST /api/token-revocations` `{subject, jti?, reason}` (docs/decisions/0695-user-tokens-can-be-revoked.md),
 * mounted behind the operator check: revokes a user's bearer tokens — every token of `subject`
 * issued before now, or the one token `jti` — and answers 200 `TokenRevocationResult`
 * (`changed: false` for a repeat); 400 `invalid_revocation` / `unknown_user` with nothing written.
 * Audited (`user_tokens.revoked`, service `ops`) in the transaction that records it. Like every
 * change on the dashboard's API it needs the bearer header (403 `bearer_required` with the cookie
 * alone: no cross-site writes).
 */
export function tokenRevocationsRouter(cfg: { db: Db; auditHmacKey: string }): Router {
  const router = Router();
  router.post('/api/token-revocations', async (req, res) => {
    if (!req.header('authorization')) throw new Forbidden('bearer_required', 'revoking tokens needs an operator bearer token');
    const result = await revokeUserTokens(cfg.db, req.body, { operator: operatorOf(res).sub, service: 'ops' }, cfg.auditHmacKey);
    res.json(result);
  });
  return router;
}
