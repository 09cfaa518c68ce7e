import { sql } from 'kysely';
import { chainHash, GENESIS_HASH, type Db } from '@gatehouse/ledger';
import { recordChainedAuditEvents, withJobSpan, type AuditMetricEvent } from '@gatehouse/telemetry';

/** Advisory lock key that makes the audit service the single writer of the chain. */
const CHAIN_LOCK = 0x6761_7465; // "gate"

/**
 * Moves up to `batch` events from `audit_outbox` into the hash chain, in outbox order, exactly
 * once: under a transaction-scoped advisory lock it assigns the next sequence numbers, computes
 * `hash = sha256(prev_hash ‖ JCS({seq, ...event}))` (`chainHash`), inserts into `audit_log` and deletes the
 * outbox rows in the same transaction. Also beats the heartbeat. After the commit the chained
 * events feed the metrics (each counted once, as committed) and each gets an `audit chain` span
 * in the trace of the span that wrote it (ADR 0020). Returns how many were chained.
 * @throws Error from `chainHash` when an outbox event carries a reserved chain key (`seq`; only a
 *   write around `recordAudit`'s schema can) or a non-finite number: nothing of the batch is chained.
 */
export async function chainPending(db: Db, batch = 500): Promise<number> {
  const chained = await db.transaction().execute(async (trx) => {
    await sql`SELECT pg_advisory_xact_lock(${CHAIN_LOCK})`.execute(trx);
    await trx
      .insertInto('audit_heartbeat')
      .values({ id: 1, beat_at: new Date() })
      .onConflict((oc) => oc.column('id').doUpdateSet({ beat_at: new Date() }))
      .execute();
    const rows = await trx.selectFrom('audit_outbox').selectAll().orderBy('id').limit(batch).execute();
    if (!rows.length) return [];
    const head = await trx.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
    let seq = head ? Number(head.seq) : 0;
    let prev = head?.hash ?? GENESIS_HASH;
    const links = rows.map((r) => {
      seq += 1;
      const hash = chainHash(prev, seq, r.event);
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
    return rows.map((r, i) => ({ ...r, seq: Number(links[i]!.seq) }));
  });
  // One short span per chained event, parented from the context of the span that wrote it, so
  // the audit service appears in the workflow's trace (events written outside a trace start none).
  for (const r of chained) {
    if (!r.traceparent) continue;
    await withJobSpan(
      'audit chain',
      { 'gatehouse.audit.seq': r.seq, 'gatehouse.audit.type': String(r.event.type ?? '') },
      r.traceparent,
      async () => {},
    );
  }
  recordChainedAuditEvents(
    chained.map((r) => ({ event: r.event as unknown as AuditMetricEvent, outboxCreatedAtMs: new Date(r.created_at).getTime() })),
  );
  return chained.length;
}

/** Unchained events in `audit_outbox` and the age of the oldest, ms by the database clock (0 when none). */
export async function readAuditBacklog(db: Db): Promise<{ events: number; oldestAgeMs: number }> {
  const r = await sql<{ n: string; age_ms: number | null }>`
    select count(*) as n, extract(epoch from now() - min(created_at)) * 1000 as age_ms from audit_outbox`.execute(db);
  const row = r.rows[0];
  return { events: Number(row?.n ?? 0), oldestAgeMs: Math.max(0, Number(row?.age_ms ?? 0)) };
}
