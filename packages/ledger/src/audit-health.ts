import { sql } from 'kysely';
import type { Db } from './db.ts';
import { DependencyUnavailable } from './working-time.ts';

/** Thresholds of the audit-health gate, ms (docs/product/invariants.md#evidence). */
export interface AuditGate {
  /** Oldest acceptable audit-service heartbeat. */
  maxHeartbeatAgeMs: number;
  /** Oldest acceptable event still waiting in `audit_outbox`. */
  maxBacklogAgeMs: number;
}

/** The gate's defaults, ms: a heartbeat at most 10 s old, no event waiting in the outbox over 30 s. */
export const DEFAULT_AUDIT_GATE: AuditGate = { maxHeartbeatAgeMs: 10_000, maxBacklogAgeMs: 30_000 };

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

/**
 * The audit-health gate of an effect that is not an execution job (a reconciliation remediation,
 * a change's cancel): one fresh reading, before any approval is consumed or any call is sent.
 * @throws AuditUnavailable (a `DependencyUnavailable` of `audit`) naming the problem, with the next
 *   step: nothing was sent, the approval is left unused, run it again once audit is healthy.
 */
export async function requireAuditHealthy(db: Db, gate: AuditGate): Promise<void> {
  const problem = await auditUnhealthyReason(db, gate);
  if (problem)
    throw new AuditUnavailable(
      `audit storage is unavailable (${problem}): nothing was sent and the approval is left unused; run this again once the audit service is healthy`,
    );
}
