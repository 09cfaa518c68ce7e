import { currentTraceparent } from '@gatehouse/telemetry';
import { createHash, createHmac } from 'node:crypto';
import { AuditEventSchema, type AuditEventInput } from '@gatehouse/contracts';
import { sql, type QueryCreator, type RawBuilder } from 'kysely';
import type { Db, Trx } from './db.ts';
import type { DB } from './schema.ts';

/**
 * Writes an audit event to `audit_outbox` in the caller's transaction, so the event exists if
 * and only if the state change it describes commits. The audit service chains it later.
 * @throws ZodError when the event carries a field the audit schema does not allow.
 */
export async function recordAudit(trx: Trx, event: AuditEventDraft): Promise<void> {
  await trx.insertInto('audit_outbox').values(auditOutboxRow(event)).execute();
}

/** An audit event as its writers give it: `atMs` defaults to now. */
export type AuditEventDraft = Omit<AuditEventInput, 'atMs'> & { atMs?: number };

/**
 * The same write as {@link recordAudit}, carried by the caller's next statement instead of one of
 * its own: returns a query creator on `trx` whose statement (`.insertInto`, `.updateTable`…) also
 * inserts `event` into `audit_outbox`, as a data-modifying CTE named `audit_event`. The event and
 * the state change it describes then take one round trip (docs/decisions/0420-audit-events-ride-on-their-statement.md).
 * Postgres runs a data-modifying CTE whether or not the main statement writes a row, so carry an
 * event only on a statement that always writes it, or whose failure to write aborts the
 * transaction (it throws).
 * @throws ZodError as {@link recordAudit}, before any statement is sent.
 */
export function withAuditEvent(trx: Trx, event: AuditEventDraft): QueryCreator<DB> {
  const row = auditOutboxRow(event);
  return trx.with('audit_event', (db) => db.insertInto('audit_outbox').values(row)) as unknown as QueryCreator<DB>;
}

/**
 * The same write as {@link recordAudit}, as the body of a data-modifying CTE that inserts `event`
 * only when the statement's earlier CTE `source` returned a row: the event of a conditional
 * UPDATE (the workflow transition's) rides on it and exists exactly when the change does (ADR
 * 0420, ADR 0540). Name the CTE after `source` in the statement's WITH list.
 * @throws ZodError as {@link recordAudit}, before any statement is sent.
 */
export function auditEventWhen(event: AuditEventDraft, source: string): RawBuilder<Record<string, never>> {
  const row = auditOutboxRow(event);
  // Kysely writes a raw CTE body as is: the parentheses are ours.
  return sql`(insert into audit_outbox (event, traceparent)
    select ${row.event}::jsonb, ${row.traceparent}::text where exists (select 1 from ${sql.table(source)}))`;
}

/** The `audit_outbox` row of `event`, validated. @throws ZodError as {@link recordAudit}. */
function auditOutboxRow(event: AuditEventDraft): { event: string; traceparent: string | null } {
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
export async function recordAuditIfPublished(db: Db, event: AuditEventDraft, job: { queue: string; jobId: string }): Promise<boolean> {
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
