import { sql } from 'kysely';
import { queueName, type QueueContract } from '@gatehouse/contracts';
import { producerTraceparent } from '@gatehouse/telemetry';
import type { Trx } from './db.ts';
import { withAuditEvent, type AuditEventDraft } from './audit.ts';

/**
 * An outbox row ready to publish: BullMQ queue, job name, deterministic job id, payload, and
 * the tenant of the job's workflow (`fair_key`; null for a job of no workflow), which orders the
 * queue fairly between tenants (docs/decisions/0500-tenant-fair-queues.md) and is not stored.
 */
export interface OutboxRow {
  id: string;
  queue: string;
  job_name: string;
  job_id: string;
  payload: Record<string, unknown>;
  fair_key: string | null;
}

/**
 * The tenant of the workflow an outbox row's payload names (`payload.workflowId`; null for none),
 * as a scalar subquery over `outbox.payload`: returned by the statement that writes a row (no
 * extra round trip) and selected by the relay's sweep.
 */
export const outboxFairKey = sql<string | null>`(select w.tenant from workflows w where w.id = (outbox.payload->>'workflowId')::uuid)`;

/**
 * Writes the next job as an outbox row inside the caller's transaction
 * (docs/product/design.md#transactional-outbox). The payload is validated against the queue's contract first; the queue
 * is the release-specific one named by `payload.release`. The write is the job's send: a
 * PRODUCER span (`send <queue>`, messaging conventions) under `payload.traceparent` or the
 * active span, whose context is stored with the job (`traceparent`) so the consumer's span is
 * its child and continues the trace (docs/decisions/0020, 0260).
 * `audit`, when given, is the audit event of the same step, written by the same statement
 * (`withAuditEvent`): the job and its event in one round trip.
 * @throws ZodError when the payload or the event breaks its contract (the transaction should roll back).
 */
export async function enqueueInTransaction<T extends { release: string; traceparent?: string }>(
  trx: Trx,
  contract: QueueContract<T>,
  payload: T,
  audit?: AuditEventDraft,
): Promise<OutboxRow> {
  const valid = contract.schema.parse(payload);
  const queue = queueName(contract.base, valid.release);
  const jobId = contract.jobId(valid);
  const traceparent = producerTraceparent(queue, jobId, valid.traceparent);
  const parsed = traceparent ? { ...valid, traceparent } : valid;
  const row = await (audit ? withAuditEvent(trx, audit) : trx)
    .insertInto('outbox')
    .values({
      queue,
      job_name: contract.jobName,
      job_id: jobId,
      payload: JSON.stringify(parsed),
      release_id: parsed.release,
    })
    .returning(['id', 'queue', 'job_name', 'job_id', 'payload'])
    .returning(outboxFairKey.as('fair_key'))
    .executeTakeFirstOrThrow();
  return row as OutboxRow;
}
