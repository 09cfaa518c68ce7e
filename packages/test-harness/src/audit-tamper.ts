import { sql } from 'kysely';
import { chainHash, GENESIS_HASH, type Db } from '@gatehouse/ledger';

/**
 * Runs `fn` in one transaction with the append-only triggers of `audit_log` and `audit_anchors`
 * off, as the database's owner could: what a tampering test does to the audit trail.
 * @throws whatever `fn` or the database throws (the transaction rolls back, the triggers stay on).
 */
export async function asAuditOwner(db: Db, fn: (trx: Db) => Promise<unknown>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`ALTER TABLE audit_log DISABLE TRIGGER USER`.execute(trx);
    await sql`ALTER TABLE audit_anchors DISABLE TRIGGER USER`.execute(trx);
    await fn(trx as unknown as Db);
    await sql`ALTER TABLE audit_anchors ENABLE TRIGGER USER`.execute(trx);
    await sql`ALTER TABLE audit_log ENABLE TRIGGER USER`.execute(trx);
  });
}

/**
 * Rewrites the chained events from seq `fromSeq` on (each one's `service` becomes `forged`) and
 * recomputes their links from the link before `fromSeq` (from genesis by default), as the
 * database's owner could: a chain that verifies on its own, which only its anchors (and their
 * witness) can contradict.
 * @param fromSeq the first rewritten seq (1-based, as `audit_log.seq`); 1 rewrites the whole chain.
 */
export async function rewriteAuditChain(db: Db, fromSeq = 1): Promise<void> {
  const rows = await db
    .selectFrom('audit_log')
    .selectAll()
    .where('seq', '>=', String(fromSeq - 1))
    .orderBy('seq')
    .execute();
  const rewritten = rows.filter((row) => Number(row.seq) >= fromSeq);
  const before = rows.find((row) => Number(row.seq) === fromSeq - 1);
  await asAuditOwner(db, async (trx) => {
    let prev = before?.hash ?? GENESIS_HASH;
    for (const row of rewritten) {
      const event = { ...(row.event as Record<string, unknown>), service: 'forged' };
      const hash = chainHash(prev, Number(row.seq), event);
      await trx
        .updateTable('audit_log')
        .set({ event: JSON.stringify(event), prev_hash: prev, hash })
        .where('seq', '=', row.seq)
        .execute();
      prev = hash;
    }
  });
}
