import { currentTraceparent } from '@gatehouse/telemetry';
import { createHash, createHmac } from 'node:crypto';
import { AuditEventSchema, type AuditEventInput } from '@gatehouse/contracts';
import { sql } from 'kysely';
import type { Db, Trx } from './db.ts';

/**
 * Writes an audit event to `audit_outbox` in the caller's transaction, so the event exists if
 * and only if the state change it describes commits. The audit service chains it later.
 * @throws ZodError when the event carries a field the audit schema does not allow.
 */
export async function recordAudit(trx: Trx, event: Omit<AuditEventInput, 'atMs'> & { atMs?: number }): Promise<void> {
  await trx.insertInto('audit_outbox').values(auditOutboxRow(event)).execute();
}

/** The `audit_outbox` row of `event`, validated. @throws ZodError as {@link recordAudit}. */
function auditOutboxRow(event: Omit<AuditEventInput, 'atMs'> & { atMs?: number }): { event: string; traceparent: string | null } {
  const parsed = AuditEventSchema.parse({ atMs: Date.now(), ...event });
  return { event: JSON.stringify(parsed), traceparent: currentTraceparent() ?? null };
}

/**
 * Writes an audit event that describes no state change of its own (e.g. `operation.replayed`:
 * a redelivery answered from the ledger) in one statement, without a transaction, and only if
 * the job `jobId` of `queue` was already published from the outbox at that moment. Returns
 * whether the event was written; when not, the caller writes the job and the event together in
 * one transaction instead.
 * @throws ZodError as {@link recordAudit}.
 */
export async function recordAuditIfPublished(
  db: Db,
  event: Omit<AuditEventInput, 'atMs'> & { atMs?: number },
  job: { queue: string; jobId: string },
): Promise<boolean> {
  const row = auditOutboxRow(event);
  const written = await db
    .insertInto('audit_outbox')
    .columns(['event', 'traceparent'])
    .expression(
      db
        .selectNoFrom([sql`cast(${row.event} as jsonb)`.as('event'), sql`cast(${row.traceparent} as text)`.as('traceparent')])
        .where((eb) =>
          eb.exists(
            eb
              .selectFrom('outbox')
              .select(sql.lit(1).as('one'))
              .where('job_id', '=', job.jobId)
              .where('queue', '=', job.queue)
              .where('published_at', 'is not', null),
          ),
        ),
    )
    .executeTakeFirst();
  return Number(written.numInsertedOrUpdatedRows ?? 0) > 0;
}

/** Keyed HMAC-SHA256 of an actor id (audit never stores raw actor ids). Hex. */
export function actorHash(hmacKey: string, actorId: string): string {
  return createHmac('sha256', hmacKey).update(actorId).digest('hex').slice(0, 32);
}

/** SHA-256 of an operation key, hex (audit stores keys hashed). */
export function operationKeyHash(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 32);
}
