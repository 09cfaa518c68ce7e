import { loadWorld, TokenRevocationRequestSchema, type TokenRevocationResult } from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, storeUserTokenRevocation, type Db } from '@gatehouse/ledger';
import { OpsUsageError } from './ops.ts';

/**
 * `gatehouse tokens revoke --user <id> [--jti <id>] --reason <why>` and `POST /api/token-revocations`
 * (docs/decisions/0695-user-tokens-can-be-revoked.md): revokes a user's bearer tokens — every token
 * of the subject issued before now, or the one token `jti` — in the ledger, under the subject's
 * token lock (`storeUserTokenRevocation`), audited `user_tokens.revoked` in the same transaction
 * (outcome `subject:<hmac>;not_before:<s>` or `subject:<hmac>;jti:<hmac>`, then
 * `;changed:<bool>;reason:<why>`). Idempotent: a second revocation of a `jti` changes nothing; a
 * second revocation of a subject moves its not-before to the new now (never back). Every service
 * refuses a revoked token from its next request after its cache's bound, and an approval decision
 * at once (ADR 0695).
 * @param input a {@link TokenRevocationRequestSchema} body (`subject`, `jti?`, `reason`).
 * @param service the audit event's service (`cli`, `ops`).
 * @throws OpsUsageError (400) `invalid_revocation` for a malformed request, `unknown_user` for a
 * subject the directory does not know (a typo would revoke nothing): nothing is written.
 */
export async function revokeUserTokens(
  db: Db,
  input: unknown,
  by: { operator: string; service: 'cli' | 'ops' },
  hmacKey: string,
): Promise<TokenRevocationResult> {
  const parsed = TokenRevocationRequestSchema.safeParse(input);
  if (!parsed.success)
    throw new OpsUsageError('invalid_revocation', 'a token revocation needs a user (subject), optionally a jti, and a reason', {
      details: parsed.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  const r = parsed.data;
  if (!loadWorld().users.some((u) => u.id === r.subject))
    throw new OpsUsageError('unknown_user', `no user ${r.subject} in the directory: nothing was revoked (user ids are as in world.json)`);
  return inTransaction(db, async (trx) => {
    const stored = await storeUserTokenRevocation(trx, {
      subject: r.subject,
      by: by.operator,
      reason: r.reason,
      ...(r.jti ? { jti: r.jti } : {}),
    });
    const what = stored.kind === 'jti' ? `jti:${actorHash(hmacKey, stored.jti)}` : `not_before:${stored.notBeforeS}`;
    await recordAudit(trx, {
      type: 'user_tokens.revoked',
      service: by.service,
      runId: null,
      actorHash: actorHash(hmacKey, by.operator),
      outcome: `subject:${actorHash(hmacKey, r.subject)};${what};changed:${stored.changed};reason:${r.reason}`,
    });
    return {
      kind: stored.kind,
      subject: r.subject,
      notBefore: stored.kind === 'subject' ? new Date(stored.notBeforeS * 1000).toISOString() : null,
      jti: stored.kind === 'jti' ? stored.jti : null,
      changed: stored.changed,
    };
  });
}
