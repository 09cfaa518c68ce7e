import { sql } from 'kysely';
import { chainHash, GENESIS_HASH, type Db } from '@gatehouse/ledger';

/** Advisory lock key that makes the audit service the single writer of the chain. */
const CHAIN_LOCK = 0x6761_7465; // "gate"

/**
 * Moves up to `batch` events from `audit_outbox` into the hash chain, in outbox order, exactly
 * once: under a transaction-scoped advisory lock it assigns the next sequence numbers, computes
 * `hash = sha256(prev_hash ‖ JCS({seq, ...event}))`, inserts into `audit_log` and deletes the
 * outbox rows in the same transaction. Also beats the heartbeat. Returns how many were chained.
 */
export async function chainPending(db: Db, batch = 500): Promise<number> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT pg_advisory_xact_lock(${CHAIN_LOCK})`.execute(trx);
    await trx
      .insertInto('audit_heartbeat')
      .values({ id: 1, beat_at: new Date() })
      .onConflict((oc) => oc.column('id').doUpdateSet({ beat_at: new Date() }))
      .execute();
    const rows = await trx.selectFrom('audit_outbox').selectAll().orderBy('id').limit(batch).execute();
    if (!rows.length) return 0;
    const head = await trx.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
    let seq = head ? Number(head.seq) : 0;
    let prev = head?.hash ?? GENESIS_HASH;
    const links = rows.map((r) => {
      seq += 1;
      const hash = chainHash(prev, { seq, ...r.event });
      const link = { seq: String(seq), outbox_id: r.id, event: JSON.stringify(r.event), prev_hash: prev, hash };
      prev = hash;
      return link;
    });
    await trx.insertInto('audit_log').values(links).execute();
    await trx
      .deleteFrom('audit_outbox')
      .where(
        'id',
        'in',
        rows.map((r) => r.id),
      )
      .execute();
    return rows.length;
  });
}
