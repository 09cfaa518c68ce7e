import { sql } from 'kysely';
import { SystemError } from '@gatehouse/platform';
import { assertEpochCurrent } from '@gatehouse/credentials';
import { EPOCH_UNAVAILABLE } from '@gatehouse/contracts';
import { transact } from '@gatehouse/ledger';
import type { StagingDb } from './staging.database.ts';

// The revocation epoch at the systems of record (docs/decisions/0685-the-epoch-fences-the-effect.md).
// This module owns reading it and the rule that an effect commits only while its token's epoch
// is in force: every effect route writes through `withEpochFence`, and the repositories' effect
// methods take only the transaction it hands out (`FencedTrx`).

declare const fenced: unique symbol;

/**
 * A transaction of the staging database opened by {@link withEpochFence}: while it is open, the
 * revocation epoch's row is share-locked and the token's epoch was found in force. The only
 * handle the repositories' effect methods (refund, reversal, shipment, cancel, mail, change
 * schedule and cancel) accept, so no effect is written unfenced.
 */
export type FencedTrx = StagingDb & { readonly [fenced]: true };

/**
 * Current revocation epoch, `public.credential_epochs` (row id 1) of `db` — the Gatehouse
 * ledger's database, which owns the table (docs/product/policy-rules.md#delegated-credentials).
 * With `lock: 'share'` (inside a transaction) the row is locked `FOR SHARE` until that
 * transaction ends: an epoch bump (an `UPDATE` of the row, whoever runs it) waits for it, and
 * the read waits for a bump under way and returns its epoch. Fails closed
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): no table, no row or a
 * database error is no epoch, and no token is accepted.
 * @throws SystemError(`epoch_unavailable`, 503) when the epoch cannot be read.
 */
export async function readRevocationEpoch(db: StagingDb, lock: 'none' | 'share' = 'none'): Promise<number> {
  let epoch: unknown;
  try {
    const r =
      lock === 'share'
        ? await sql<{ epoch: number }>`SELECT epoch FROM public.credential_epochs WHERE id = 1 FOR SHARE`.execute(db)
        : await sql<{ epoch: number }>`SELECT epoch FROM public.credential_epochs WHERE id = 1`.execute(db);
    epoch = r.rows[0]?.epoch;
  } catch {
    throw new SystemError(EPOCH_UNAVAILABLE, 'cannot read the revocation epoch');
  }
  if (epoch === undefined || epoch === null) throw new SystemError(EPOCH_UNAVAILABLE, 'no revocation epoch is recorded');
  return Number(epoch);
}

/** Share-locks the epoch row in `trx` and checks the token's epoch against it (the one rule). */
async function holdEpoch(trx: StagingDb, tokenEpoch: number): Promise<void> {
  assertEpochCurrent(tokenEpoch, await readRevocationEpoch(trx, 'share'));
}

/**
 * Runs one effect so that it commits only while the token's epoch is in force: no effect of an
 * old-epoch token commits after an epoch bump committed (ADR 0685). The epoch row is locked
 * `FOR SHARE` and the token's epoch checked before `effect` runs, and the lock is held until the
 * effect's transaction has committed; a bump (`UPDATE … SET epoch`) waits for it. `spend` (the
 * token's spend, `bindDelegation`) runs first and is kept even when the effect fails:
 * - Same database (`epochDb` is `db`): one transaction — the spend, a savepoint, the lock, then
 *   the effect; when the effect (or the lock) fails, the transaction returns to the savepoint and
 *   commits the spend alone (docs/decisions/0764-the-token-spend-and-the-effect-commit-once.md).
 * - Separate epoch database: the spend commits in its own transaction first; then a transaction
 *   there holds the lock around the effect's transaction in `db`, and the lock is read again just
 *   before the effect commits (its session is still there, so its lock is); the effect commits,
 *   then the epoch transaction ends. If only that end fails, the effect committed under the lock
 *   and its result is returned.
 * @param deps.db the staging database; @param deps.delegation.epochDb the epoch's database.
 * @param claims.epoch the token's epoch claim.
 * @throws whatever `spend` throws (`token_replayed`, `stale_fencing_token`): nothing is written.
 * @throws DelegationRejected(`revoked_epoch`, 403) when a bump committed since the token was
 *   verified — nothing of `effect` is written.
 * @throws SystemError(`epoch_unavailable`, 503) when the epoch cannot be read or locked, its
 *   transaction cannot begin, or its connection ends before the effect commits (the rollback's
 *   connection error never replaces the reason, {@link transact}): the effect is rolled back, so
 *   this answer always means nothing was written ({@link EPOCH_UNAVAILABLE}, ADR 0698).
 * @throws whatever `effect` throws (its writes roll back).
 */
export async function withEpochFence<T>(
  deps: { db: StagingDb; delegation: { epochDb: StagingDb } },
  claims: { epoch: number },
  effect: (trx: FencedTrx) => Promise<T>,
  spend: ((trx: StagingDb) => Promise<void>) | null = null,
): Promise<T> {
  const { db } = deps;
  const epochDb = deps.delegation.epochDb;
  if (epochDb === db) return spendThenFence(db, claims, spend, effect);
  if (spend) await transact(db, spend);
  let began = false;
  let done: { value: T } | undefined;
  try {
    await transact(epochDb, async (etrx) => {
      began = true;
      await holdEpoch(etrx, claims.epoch);
      const value = await transact(db, async (trx) => {
        const result = await effect(trx as unknown as FencedTrx);
        await holdEpoch(etrx, claims.epoch); // fence at commit: the lock's session is alive
        return result;
      });
      done = { value };
    });
  } catch (err) {
    if (done) return done.value; // only the epoch transaction's end failed: the effect committed
    if (!began) throw new SystemError(EPOCH_UNAVAILABLE, 'cannot read the revocation epoch', { cause: err });
    throw err;
  }
  return done!.value;
}

/**
 * The same-database fence of {@link withEpochFence}: one transaction holding the spend, then
 * (after a savepoint) the epoch's lock and the effect. A failed effect returns to the savepoint
 * and the spend commits alone; its error is thrown after the commit, and a connection error of
 * the return or the commit never replaces it (nothing of the effect was committed either way).
 */
async function spendThenFence<T>(
  db: StagingDb,
  claims: { epoch: number },
  spend: ((trx: StagingDb) => Promise<void>) | null,
  effect: (trx: FencedTrx) => Promise<T>,
): Promise<T> {
  let failed: { err: unknown } | undefined;
  let value: T | undefined;
  try {
    value = await transact(db, async (trx) => {
      if (!spend) {
        await holdEpoch(trx, claims.epoch);
        return effect(trx as unknown as FencedTrx);
      }
      await spend(trx);
      await sql`SAVEPOINT effect`.execute(trx);
      try {
        await holdEpoch(trx, claims.epoch);
        return await effect(trx as unknown as FencedTrx);
      } catch (err) {
        failed = { err };
        await sql`ROLLBACK TO SAVEPOINT effect`.execute(trx);
        return undefined;
      }
    });
  } catch (err) {
    throw failed ? failed.err : err;
  }
  if (failed) throw failed.err;
  return value as T;
}
