import { sql } from 'kysely';
import { bindingDigest, DelegationRejected, type BindingTarget, type DelegatedClaims, type JWTVerifyGetKey } from '@gatehouse/credentials';
import type { StagingDb } from '../db/staging.database.ts';
import { observeFencingToken } from '../repositories/fencing.repository.ts';
import { testFaults } from '@gatehouse/contracts';

/**
 * How the systems of record verify delegated tokens: the minting side's public keys (a JWKS,
 * chosen by `kid`), where the revocation epoch is read, and whether the request binding is
 * checked (off only through `GATEHOUSE_TEST_DISABLE_TOKEN_BINDING`, a control-removed test).
 */
export interface DelegationVerifier {
  keys: JWTVerifyGetKey;
  /** Database holding `public.credential_epochs` (the Gatehouse ledger's); the staging database when the same. */
  epochDb: StagingDb;
  bindingDisabled: boolean;
}

/**
 * Reads `GATEHOUSE_TEST_DISABLE_TOKEN_BINDING` (docs/decisions/0016-test-only-hooks.md).
 * @throws Error when it is set outside `GATEHOUSE_ENV=test`.
 */
export function readTokenBindingSwitch(env: Record<string, string | undefined>): boolean {
  return testFaults(env).disableTokenBinding;
}

/** Creates `staging.delegation_jtis` (used token ids until their expiry) if missing; inside the schema transaction. */
export async function ensureTokenBindingSchema(trx: StagingDb): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS staging.delegation_jtis (
    jti text PRIMARY KEY,
    op text NOT NULL,
    expires_at timestamptz NOT NULL
  )`.execute(trx);
  await sql`CREATE INDEX IF NOT EXISTS delegation_jtis_expiry_idx ON staging.delegation_jtis (expires_at)`.execute(trx);
}

/** Fencing namespace, in `staging.fencing_tokens`, of operations seen through their tokens. */
const TOKEN_FENCE_TARGET = 'delegation';

/**
 * Records the token's `jti` as used, once: a second request carrying it is refused. Rows are
 * kept until a minute past the token's expiry (an expired token is refused anyway) and pruned
 * a few at a time on the way.
 * @throws DelegationRejected(`token_replayed`) when the jti was used before.
 */
async function consumeJti(db: StagingDb, claims: DelegatedClaims): Promise<void> {
  const inserted = await sql<{ jti: string }>`
    INSERT INTO staging.delegation_jtis (jti, op, expires_at) VALUES (${claims.jti}, ${claims.op}, to_timestamp(${claims.exp}))
    ON CONFLICT (jti) DO NOTHING RETURNING jti`.execute(db);
  if (inserted.rows.length === 0) throw new DelegationRejected('token_replayed');
  await sql`DELETE FROM staging.delegation_jtis WHERE jti IN (
    SELECT jti FROM staging.delegation_jtis WHERE expires_at < now() - interval '1 minute' LIMIT 100)`.execute(db);
}

/**
 * Checks that a verified token was minted for exactly this request
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md), then spends its `jti`:
 * - the `Idempotency-Key` (when the downstream takes one) equals the token's `op`;
 * - {@link bindingDigest} of the request's `scope` and `target` equals the token's `dig`;
 * - an `X-Fencing-Token` header, when sent, equals the token's `fence`, and that fence is not
 *   below the highest seen for the `op` (fencing at the system of record);
 * - the `jti` was never used.
 * A repeat of a request with the same key and a fresh token is the idempotent replay path.
 * @returns the fencing token the effect records: the token's `fence` (the header's when the
 *   binding is switched off by the test hook).
 * @throws DelegationRejected `op_mismatch`, `target_mismatch`, `fence_mismatch` (403),
 *   `token_replayed` (403); ConflictError `stale_fencing_token` (409).
 */
export async function bindDelegation(
  db: StagingDb,
  verifier: DelegationVerifier,
  claims: DelegatedClaims,
  request: { idempotencyKey: string | null; target: BindingTarget; headerFence: number | null },
): Promise<number | null> {
  if (verifier.bindingDisabled) return request.headerFence;
  if (request.idempotencyKey !== null && request.idempotencyKey !== claims.op) throw new DelegationRejected('op_mismatch');
  if (bindingDigest(claims.scope, request.target) !== claims.dig) throw new DelegationRejected('target_mismatch');
  if (request.headerFence !== null && request.headerFence !== claims.fence) throw new DelegationRejected('fence_mismatch');
  await observeFencingToken(db, `${TOKEN_FENCE_TARGET}:${claims.aud}`, claims.op, claims.fence);
  await consumeJti(db, claims);
  return claims.fence;
}
