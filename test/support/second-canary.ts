import type { Db } from '@gatehouse/ledger';
import { activateRelease } from '@gatehouse/operations';

/**
 * Opens `id`'s canary for `cohort` beside the candidates already open in `db`, as a ledger from
 * before ADR 0728 may hold them (a second opening is refused since): the open candidates are set
 * aside (status only; cohorts kept) for the real activation and put back after it. `op` is the
 * operator and audit HMAC key the activation is recorded with.
 */
export async function openSecondCanary(
  db: Db,
  id: string,
  cohort: { tenants: string[]; users: string[] },
  op: { operator: string; hmacKey: string },
): Promise<void> {
  const open = (await db.selectFrom('releases').select('id').where('status', '=', 'candidate').execute()).map((r) => r.id);
  if (!open.length) throw new Error('openSecondCanary: no canary is open');
  await db.updateTable('releases').set({ status: 'retired' }).where('id', 'in', open).execute();
  try {
    await activateRelease(db, id, { ...op, cohort });
  } finally {
    await db.updateTable('releases').set({ status: 'candidate' }).where('id', 'in', open).execute();
  }
}
