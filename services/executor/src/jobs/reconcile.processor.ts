import type { Worker } from 'bullmq';
import { queueName, reconcileQueue, type ReconcileJob } from '@gatehouse/contracts';
import type { DelegationSigningKey } from '@gatehouse/credentials';
import type { AuditGate, Db } from '@gatehouse/ledger';
import {
  createWorker,
  type DrainGate,
  type JobHold,
  type Logger,
  type OutboxRelay,
  type PostgresGate,
  type QueueRegistry,
} from '@gatehouse/platform';
import { executeApprovedRemediations, runReconciliation } from '@gatehouse/reconciliation';

/** Who the job's passes are attributed to in the audit chain (hashed). */
export const RECONCILIATION_JOB_ACTOR = 'reconciliation-job';

/** Dependencies of {@link processReconcile}. */
export interface ReconcileDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  stagingUrl: string;
  /** Ed25519 key minting the remediations' delegated tokens. */
  signingKey: DelegationSigningKey;
  auditHmacKey: string;
  release: string;
  /** Support bundle in force (its auto limit selects refunds over it). */
  supportRevision: string;
  changeRevision: string;
  policyDir?: string;
  /** The audit-health gate a remediation checks before its claim (the executor's). */
  auditGate?: AuditGate;
  /**
   * Whether the systems of record refuse this executor's delegated tokens (its `DelegationTrust`,
   * ADR 0767): while it holds, approved remediations are left approved for a pass of an executor
   * whose key they trust — each would otherwise end refused with 401 and need a new approval.
   */
  delegationTrust?: Pick<JobHold, 'holds'>;
}

/**
 * One `reconcile` job (docs/product/reconciliation.md): first executes the remediations leads approved since
 * the last pass (each exactly once, under `recon_<itemId>`; none while `deps.delegationTrust` holds), then runs a reconciliation pass and
 * publishes the results of the calls it resumed. Logs a `reconciliation_worklist` alert line
 * while differences stay unexplained. Returns a one-line summary (stored with the job).
 * @throws ReadBackUnavailable when a system of record cannot be read (the next pass retries).
 */
export async function processReconcile(job: ReconcileJob, deps: ReconcileDeps): Promise<string> {
  const common = {
    db: deps.db,
    stagingUrl: deps.stagingUrl,
    hmacKey: deps.auditHmacKey,
    supportRevision: deps.supportRevision,
    changeRevision: deps.changeRevision,
    policyDir: deps.policyDir,
  };
  const held = (await deps.delegationTrust?.holds()) === true;
  if (held)
    deps.log.warn({ alert: 'remediations_held' }, 'approved remediations held: the systems of record do not trust this delegation key');
  const remediated = held
    ? []
    : await executeApprovedRemediations({ ...common, release: deps.release, signingKey: deps.signingKey, auditGate: deps.auditGate });
  for (const r of remediated) if (r.state === 'resolved') await deps.relay.publish(r.rows);
  const report = await runReconciliation({ ...common, actor: RECONCILIATION_JOB_ACTOR });
  await deps.relay.publish(report.rows);
  const summary = `run ${report.runId} (${job.trigger}): ${report.findings.length} compared, ${report.counts.matched} matched, ${report.resumed} resumed, ${report.explained} explained, ${report.unexplained} unexplained; ${held ? 'remediations held (delegation key untrusted)' : `${remediated.filter((r) => r.state === 'resolved').length} remediation(s) executed`}`;
  if (report.unexplained > 0) {
    deps.log.warn(
      { alert: 'reconciliation_worklist', unexplained: report.unexplained, runId: report.runId },
      'reconciliation: differences await their owners',
    );
  } else deps.log.info({ runId: report.runId }, summary);
  return summary;
}

/**
 * Starts the release's `reconcile` worker (concurrency 1) and, when `intervalMs` > 0, upserts
 * the repeatable job scheduler that adds a pass every `intervalMs` ms (0 removes it: passes run
 * only on demand). The scheduler is set in the background: with Redis down at boot it is set once
 * Redis answers, and the process starts listening meanwhile (its `/readyz` names Redis). Returns
 * the worker (for graceful shutdown) and `scheduled`, which rejects when the schedule could not be
 * set for another reason: the caller ends the process then (a refused boot, as before ADR 0653).
 */
export function startReconcileJob(
  deps: ReconcileDeps,
  opts: { queues: QueueRegistry; gate: PostgresGate; drain?: DrainGate; prefix: string; redisUrl: string; intervalMs: number },
): { worker: Worker; scheduled: Promise<unknown> } {
  const worker = createWorker(reconcileQueue, (p: ReconcileJob) => processReconcile(p, deps), {
    release: deps.release,
    prefix: opts.prefix,
    redisUrl: opts.redisUrl,
    log: deps.log,
    gate: opts.gate,
    drain: opts.drain,
    concurrency: 1,
  });
  const queue = opts.queues.get(queueName(reconcileQueue.base, deps.release));
  const scheduled =
    opts.intervalMs > 0
      ? queue.upsertJobScheduler(
          'reconcile-every',
          { every: opts.intervalMs },
          { name: reconcileQueue.jobName, data: { release: deps.release, trigger: 'schedule' }, opts: reconcileQueue.options },
        )
      : queue.removeJobScheduler('reconcile-every');
  return { worker, scheduled };
}
