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
 * a few at a time by the same statement.
 * @throws DelegationRejected(`token_replayed`) when the jti was used before.
 */
async function consumeJti(db: StagingDb, claims: DelegatedClaims): Promise<void> {
  const inserted = await sql<{ jti: string }>`
    WITH pruned AS (
      DELETE FROM staging.delegation_jtis WHERE jti IN (
        SELECT jti FROM staging.delegation_jtis WHERE expires_at < now() - interval '1 minute' LIMIT 100))
    INSERT INTO staging.delegation_jtis (jti, op, expires_at) VALUES (${claims.jti}, ${claims.op}, to_timestamp(${claims.exp}))
    ON CONFLICT (jti) DO NOTHING RETURNING jti`.execute(db);
  if (inserted.rows.length === 0) throw new DelegationRejected('token_replayed');
}

/**
 * A request's token binding, checked: the fencing token its effect records, and the token's
 * spend — the writes that record its `fence` for the `op` and its `jti` as used — which
 * `withEpochFence` runs first in the effect's transaction and keeps even when the effect then
 * fails (docs/decisions/0764-the-token-spend-and-the-effect-commit-once.md). `spend` is null when
 * the binding is switched off by the test hook (nothing is recorded).
 */
export interface Binding {
  fencingToken: number | null;
  spend: ((trx: StagingDb) => Promise<void>) | null;
}

/**
 * Checks that a verified token was minted for exactly this request
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md), before anything is written:
 * - the `Idempotency-Key` (when the downstream takes one) equals the token's `op`;
 * - {@link bindingDigest} of the request's `scope` and `target` equals the token's `dig`;
 * - an `X-Fencing-Token` header, when sent, equals the token's `fence`.
 * Its {@link Binding.spend} then checks, in the effect's transaction, that the `fence` is not
 * below the highest seen for the `op` (fencing at the system of record) and that the `jti` was
 * never used, recording both. A repeat of a request with the same key and a fresh token is the
 * idempotent replay path.
 * @returns the fencing token the effect records (the token's `fence`; the header's when the
 *   binding is switched off by the test hook) and the spend.
 * @throws DelegationRejected `op_mismatch`, `target_mismatch`, `fence_mismatch` (403); its spend
 *   throws DelegationRejected `token_replayed` (403) and ConflictError `stale_fencing_token` (409).
 */
export function bindDelegation(
  verifier: DelegationVerifier,
  claims: DelegatedClaims,
  request: { idempotencyKey: string | null; target: BindingTarget; headerFence: number | null },
): Binding {
  if (verifier.bindingDisabled) return { fencingToken: request.headerFence, spend: null };
  if (request.idempotencyKey !== null && request.idempotencyKey !== claims.op) throw new DelegationRejected('op_mismatch');
  if (bindingDigest(claims.scope, request.target) !== claims.dig) throw new DelegationRejected('target_mismatch');
  if (request.headerFence !== null && request.headerFence !== claims.fence) throw new DelegationRejected('fence_mismatch');
  const spend = async (trx: StagingDb): Promise<void> => {
    await observeFencingToken(trx, `${TOKEN_FENCE_TARGET}:${claims.aud}`, claims.op, claims.fence);
    await consumeJti(trx, claims);
  };
  return { fencingToken: claims.fence, spend };
}
