import { sql, type RawBuilder } from 'kysely';
import type { Db, Trx } from './db.ts';
import { DependencyUnavailable } from './working-time.ts';

// The revocation epoch fails closed (docs/decisions/0170-delegated-credentials-bind-the-operation.md):
// when `credential_epochs` or its row 1 cannot be read, no delegated token is minted — the caller
// holds the step as a dependency fault instead of minting with an epoch it made up. This module
// owns that rule; callers read the epoch either on its own (`readCredentialEpoch`) or with
// another read (`credentialEpochColumn`, then `requireCredentialEpoch`).

/**
 * The current revocation epoch (`credential_epochs`, row id 1) as a scalar subquery, for a read
 * that takes it along (null when the row is missing). Pass the value to
 * {@link requireCredentialEpoch}. A read that selects it fails as a whole when the table is gone
 * or unreadable: the caller reads again without it and passes null.
 */
export const credentialEpochColumn: RawBuilder<number | string | null> = sql<
  number | string | null
>`(select epoch from credential_epochs where id = 1)`;

/**
 * The epoch a {@link credentialEpochColumn} read returned, as a number.
 * @throws DependencyUnavailable(`postgres`) when it is null (row 1 is missing).
 */
export function requireCredentialEpoch(value: number | string | null | undefined): number {
  if (value === null || value === undefined)
    throw new DependencyUnavailable('postgres', 'no revocation epoch can be read (credential_epochs or its row 1 is missing)');
  return Number(value);
}

/**
 * The current revocation epoch (`credential_epochs`, row id 1), read on its own before a
 * delegated token is minted (fails closed, see above).
 * @throws DependencyUnavailable(`postgres`) when the table, its row or the database is unavailable.
 */
export async function readCredentialEpoch(db: Db | Trx): Promise<number> {
  let row: { epoch: number } | undefined;
  try {
    row = await db.selectFrom('credential_epochs').select('epoch').where('id', '=', 1).executeTakeFirst();
  } catch (err) {
    throw new DependencyUnavailable('postgres', `the revocation epoch cannot be read: ${(err as Error).message}`, { cause: err });
  }
  return requireCredentialEpoch(row?.epoch);
}

/**
 * Takes the epoch bump's lock: `credential_epochs` in `EXCLUSIVE` mode, in `trx`, before the
 * bump's `UPDATE` (docs/decisions/0685-the-epoch-fences-the-effect.md). The systems of record
 * write each effect while holding the epoch row `FOR SHARE` (a `ROW SHARE` table lock), so this
 * waits for the effects in flight; and because table locks queue fairly, effects arriving while
 * the bump waits queue behind it and then read the bumped epoch — the row lock alone let new share
 * lockers join the ones in flight, so a bump under steady traffic could wait on and on while
 * old-epoch effects kept committing. Plain reads (`ACCESS SHARE`, minting) are not blocked.
 */
export async function lockCredentialEpochForBump(trx: Trx): Promise<void> {
  await sql`LOCK TABLE credential_epochs IN EXCLUSIVE MODE`.execute(trx);
}
