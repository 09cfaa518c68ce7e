import { currentTraceparent } from '@gatehouse/telemetry';
import { createHash, createHmac } from 'node:crypto';
import { AuditEventSchema, type AuditEventInput } from '@gatehouse/contracts';
import type { Trx } from './db.ts';

/**
 * Writes an audit event to `audit_outbox` in the caller's transaction, so the event exists if
 * and only if the state change it describes commits. The audit service chains it later.
 * @throws ZodError when the event carries a field the audit schema does not allow.
 */
export async function recordAudit(trx: Trx, event: Omit<AuditEventInput, 'atMs'> & { atMs?: number }): Promise<void> {
  const parsed = AuditEventSchema.parse({ atMs: Date.now(), ...event });
  await trx
    .insertInto('audit_outbox')
    .values({ event: JSON.stringify(parsed), traceparent: currentTraceparent() ?? null })
    .execute();
}

/** Keyed HMAC-SHA256 of an actor id (audit never stores raw actor ids). Hex. */
export function actorHash(hmacKey: string, actorId: string): string {
  return createHmac('sha256', hmacKey).update(actorId).digest('hex').slice(0, 32);
}

/** SHA-256 of an operation key, hex (audit stores keys hashed). */
export function operationKeyHash(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 32);
}
