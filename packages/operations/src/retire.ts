import { ConflictError } from '@gatehouse/contracts';
import { actorHash, inTransaction, lockReleases, recordAudit, type Db, type Trx } from '@gatehouse/ledger';
import { within, type QueueRegistry } from '@gatehouse/platform';
import { sql } from 'kysely';
import { formatCohort, type CohortLists } from './cohort.ts';
import { liveRunCount, pauseReleaseQueues, queuedJobs } from './queue-ops.ts';
import { checkRollbackReason, QUEUE_RESUME_TIMEOUT_MS, retireReleases, type RollbackReport } from './releases.ts';

/**
 * Thrown by {@link retireCandidate} before anything changes when `release` is not an open
 * candidate (409; CLI exit 1): `not_registered`, `active` (ending the active release is a rollback)
 * or `retired` (nothing to retire).
 */
export class RetireRefused extends ConflictError {
  constructor(release: string, why: 'not_registered' | 'active' | 'retired', message: string) {
    super(`retire_${why}`, `release ${release} ${message}; nothing was changed`);
  }
}

/** What an operator passes to {@link retireCandidate}. */
export interface RetireOptions {
  /** Why on-call ends the canary: 1–500 printable characters, recorded in the audit chain. */
  reason: string;
  operator: string;
  hmacKey: string;
}

/** What {@link retireCandidate} did, and what is left for an explicit choice. */
export interface RetireReport {
  release: string;
  /** The cohort it served (as `--cohort` spells it), now routed to `active`. */
  cohort: string;
  /** The active release the cohort's new tickets go to (unchanged, writes as they were); null when none. */
  active: string | null;
  /** Approvals of the candidate that were expired (they can never be consumed). */
  expiredApprovals: number;
  /** Its operations by status; running and failed_unknown go to reconciliation. */
  operations: RollbackReport['operations'];
  /** Its queues paused in Redis; empty when Redis could not be reached (see `queuesNotPaused`). */
  paused: string[];
  /** Why its queues were not paused in Redis (null when they were); the ledger's drain mark holds its jobs anyway (ADR 0480). */
  queuesNotPaused: string | null;
  /** Jobs still queued on it: each needs `queues requeue` or `queues quarantine` (null when Redis could not be read). */
  queuedJobs: number | null;
  /** Runs still live on it, from the ledger (a run waiting on its approval has no job queued): the same choice. */
  liveRuns: number;
}

/**
 * `gatehouse release retire <candidate> --reason <why>` (docs/decisions/0728): ends one open
 * canary alone, the rollback's steps for that release only. In one transaction under the releases
 * lock: its writes off, its drain marked in the ledger (workers hold its jobs, ADR 0480; in-flight
 * work finishes), its pending and unconsumed approvals expired, its operations inventoried by
 * status (running and failed_unknown are left for reconciliation, never retried), the release
 * retired with no cohort — so its cohort's new tickets route to the active release, whose writes
 * and status are not touched — and `release.retired` audited with the reason. Then its queues are
 * paused in Redis, its queued jobs and (from the ledger) its live runs counted (never moved:
 * on-call requeues or quarantines them);
 * a Redis failure there is reported, not thrown, since the retirement stands.
 * @throws Error when the reason is missing or malformed (nothing changes).
 * @throws RetireRefused when `release` is not an open candidate, also when it stopped being one
 *   under the lock (a concurrent promotion or rollback; nothing changes).
 */
export async function retireCandidate(db: Db, queues: QueueRegistry, release: string, opts: RetireOptions): Promise<RetireReport> {
  const reason = checkRollbackReason(opts.reason, 'release retire');
  await requireCandidate(db, release);
  const ledger = await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    const cohort = await requireCandidate(trx, release); // again under the lock: it may have been promoted meanwhile
    await trx
      .updateTable('releases')
      .set({ writes_enabled: false, draining: true, draining_since: sql`coalesce(draining_since, now())` })
      .where('id', '=', release)
      .execute();
    const retired = await retireReleases(trx, [release]);
    const active = await trx.selectFrom('releases').select('id').where('status', '=', 'active').executeTakeFirst();
    await recordAudit(trx, {
      type: 'release.retired',
      service: 'cli',
      runId: null,
      actorHash: actorHash(opts.hmacKey, opts.operator),
      outcome: `cohort:${cohort};expired_approvals:${retired.expiredApprovals};operations:${JSON.stringify(retired.operations)};reason:${reason}`,
      revisions: { release },
    });
    return { ...retired, cohort, active: active?.id ?? null };
  });
  const redis = await within(
    (async () => {
      const paused = await pauseReleaseQueues(queues, release);
      return { paused, queued: (await queuedJobs(queues, release)).length };
    })(),
    QUEUE_RESUME_TIMEOUT_MS,
  ).then(
    (r) => ({ ...r, error: null }),
    (err: unknown) => ({ paused: [], queued: null, error: err instanceof Error ? err.message : String(err) }),
  );
  const liveRuns = await liveRunCount(db, [release]);
  return { release, ...ledger, paused: redis.paused, queuesNotPaused: redis.error, queuedJobs: redis.queued, liveRuns };
}

/**
 * The cohort of `release` (as `--cohort` spells it) when it is an open candidate.
 * @throws RetireRefused naming what it is instead, and what to run.
 */
async function requireCandidate(db: Db | Trx, release: string): Promise<string> {
  const r = await db.selectFrom('releases').select(['status', 'cohort']).where('id', '=', release).executeTakeFirst();
  if (!r) throw new RetireRefused(release, 'not_registered', 'is not registered in this ledger: retire ends an open candidate');
  if (r.status === 'active')
    throw new RetireRefused(
      release,
      'active',
      'is the active release, not a candidate: a former release is restored by gatehouse release rollback --to <former> --reason "<why>"',
    );
  if (r.status !== 'candidate') throw new RetireRefused(release, 'retired', 'is already retired: no canary of it is open');
  return formatCohort((typeof r.cohort === 'string' ? JSON.parse(r.cohort) : r.cohort) as CohortLists | null);
}
