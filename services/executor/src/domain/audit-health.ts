import { sql } from 'kysely';
import { DependencyUnavailable, type Db } from '@gatehouse/ledger';

/** Thresholds of the audit-health gate, ms. */
export interface AuditGate {
  /** Oldest acceptable audit-service heartbeat. */
  maxHeartbeatAgeMs: number;
  /** Oldest acceptable event still waiting in `audit_outbox`. */
  maxBacklogAgeMs: number;
}

/** Thrown when audit storage is unhealthy: the step is held until it is healthy (docs/product/invariants.md#evidence). */
export class AuditUnavailable extends DependencyUnavailable {
  constructor(reason: string) {
    super('audit', reason);
  }
}

/** The audit-health readings, ms (null: no heartbeat / an empty outbox). */
export interface AuditHealthReading {
  beatAgeMs: number | string | null;
  backlogAgeMs: number | string | null;
}

/** The audit-health readings as SQL scalar subqueries, to be selected with other columns. */
export const auditHealthColumns = [
  sql<number | null>`(select extract(epoch from now() - beat_at) * 1000 from audit_heartbeat where id = 1)`.as('beatAgeMs'),
  sql<number | null>`(select extract(epoch from now() - min(created_at)) * 1000 from audit_outbox)`.as('backlogAgeMs'),
] as const;

/**
 * Why consequential execution must not start now, or null when audit is healthy: the audit
 * service's heartbeat is missing or older than the gate, or events wait in the outbox longer
 * than it allows (the chain is not being written).
 */
export function auditHealthProblem(row: AuditHealthReading, gate: AuditGate): string | null {
  if (row.beatAgeMs === null) return 'no audit heartbeat';
  if (Number(row.beatAgeMs) > gate.maxHeartbeatAgeMs) return `audit heartbeat ${Math.round(Number(row.beatAgeMs))} ms old`;
  if (row.backlogAgeMs !== null && Number(row.backlogAgeMs) > gate.maxBacklogAgeMs)
    return `audit backlog ${Math.round(Number(row.backlogAgeMs))} ms old`;
  return null;
}

/** {@link auditHealthProblem} of a fresh reading (one statement). */
export async function auditUnhealthyReason(db: Db, gate: AuditGate): Promise<string | null> {
  return auditHealthProblem(await db.selectNoFrom([...auditHealthColumns]).executeTakeFirstOrThrow(), gate);
}
