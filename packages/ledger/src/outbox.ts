import { sql, type RawBuilder } from 'kysely';
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
  const row = await (audit ? withAuditEvent(trx, audit) : trx)
    .insertInto('outbox')
    .values(outboxJob(contract, payload))
    .returning(['id', 'queue', 'job_name', 'job_id', 'payload'])
    .returning(outboxFairKey.as('fair_key'))
    .executeTakeFirstOrThrow();
  return row as OutboxRow;
}

/** An outbox row before it is written: the columns {@link outboxJob} fills. */
export interface OutboxJob {
  queue: string;
  job_name: string;
  job_id: string;
  /** The validated payload, with the producer's `traceparent`, as JSON text. */
  payload: string;
  release_id: string;
}

/**
 * The outbox row of the next job, as {@link enqueueInTransaction} writes it: the payload validated
 * against the queue's contract, the release-specific queue, the deterministic job id, and the
 * PRODUCER span's context stored with the job (docs/decisions/0020, 0260).
 * @throws ZodError when the payload breaks its contract.
 */
export function outboxJob<T extends { release: string; traceparent?: string }>(contract: QueueContract<T>, payload: T): OutboxJob {
  const valid = contract.schema.parse(payload);
  const queue = queueName(contract.base, valid.release);
  const jobId = contract.jobId(valid);
  const traceparent = producerTraceparent(queue, jobId, valid.traceparent);
  const parsed = traceparent ? { ...valid, traceparent } : valid;
  return { queue, job_name: contract.jobName, job_id: jobId, payload: JSON.stringify(parsed), release_id: parsed.release };
}

/**
 * The body of a data-modifying CTE that writes `job` only when the statement's earlier CTE
 * `source` returned a row, and returns it as {@link OutboxRow} columns: the next job of a
 * conditional write (the fenced record's) rides on that write (ADR 0540). Name the CTE after
 * `source` in the statement's WITH list.
 */
export function outboxInsertWhen(job: OutboxJob, source: string): RawBuilder<OutboxRow> {
  // Kysely writes a raw CTE body as is: the parentheses are ours.
  return sql<OutboxRow>`(insert into outbox (queue, job_name, job_id, payload, release_id)
    select ${job.queue}, ${job.job_name}, ${job.job_id}, ${job.payload}::jsonb, ${job.release_id}
    where exists (select 1 from ${sql.table(source)})
    returning id, queue, job_name, job_id, payload, ${outboxFairKey} as fair_key)`;
}
