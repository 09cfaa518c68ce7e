import { ConflictError } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';

/**
 * Records `token` as seen for (`target`, `key`) inside the caller's transaction and refuses a
 * token lower than the highest seen (docs/product/design.md#leases-with-fencing: a stale token is
 * refused by the staging services). Equal tokens pass: a retry within the same lease. The
 * upsert locks the row, so concurrent requests for one key are serialised here.
 * @throws ConflictError(`stale_fencing_token`) — the transaction must roll back (no effect).
 */
export async function observeFencingToken(trx: StagingDb, target: string, key: string, token: number): Promise<void> {
  const row = await trx
    .insertInto('staging.fencing_tokens')
    .values({ target, idempotency_key: key, highest: token })
    .onConflict((oc) =>
      oc.columns(['target', 'idempotency_key']).doUpdateSet((eb) => ({
        highest: eb.fn('greatest', [eb.ref('staging.fencing_tokens.highest'), eb.ref('excluded.highest')]),
      })),
    )
    .returning('highest')
    .executeTakeFirstOrThrow();
  const highest = Number(row.highest);
  if (highest > token) {
    throw new ConflictError('stale_fencing_token', `fencing token ${token} is below ${highest}, the highest seen for this key`);
  }
}
