import type { Db, Trx } from './db.ts';
import { DependencyUnavailable } from './working-time.ts';

/**
 * The current revocation epoch (`credential_epochs`, row id 1), read before a delegated token is
 * minted. Fails closed (docs/decisions/0170-delegated-credentials-bind-the-operation.md): when the
 * table or its row cannot be read no token is minted — the caller holds the step as a dependency
 * fault instead of minting with an epoch it made up.
 * @throws DependencyUnavailable(`postgres`) when the table, its row or the database is unavailable.
 */
export async function readCredentialEpoch(db: Db | Trx): Promise<number> {
  let row: { epoch: number } | undefined;
  try {
    row = await db.selectFrom('credential_epochs').select('epoch').where('id', '=', 1).executeTakeFirst();
  } catch (err) {
    throw new DependencyUnavailable('postgres', `the revocation epoch cannot be read: ${(err as Error).message}`, { cause: err });
  }
  if (!row) throw new DependencyUnavailable('postgres', 'no revocation epoch is recorded (credential_epochs row 1 is missing)');
  return Number(row.epoch);
}
