import { DelayedError, type Job } from 'bullmq';
import type { Dependency, OutageMark } from '@gatehouse/contracts';
import { DependencyUnavailable, isConnectionFault } from '@gatehouse/ledger';
import type { Logger } from './logger.ts';

/** A BullMQ job as a queue handler receives it (second argument of a `JobHandler`). */
export type QueueJob = Job;

/** Longest pause between two looks at an unavailable dependency, ms. */
export const OUTAGE_RECHECK_CAP_MS = 30_000;

/**
 * The dependency `err` says is unavailable: a {@link DependencyUnavailable}'s, or the ledger's
 * for a connection fault (`isConnectionFault`); else null.
 */
export function unavailableDependency(err: unknown): Dependency | null {
  if (err instanceof DependencyUnavailable) return err.dependency;
  if (isConnectionFault(err)) return 'postgres';
  return null;
}

/**
 * Records on a held job the outage it waits through (`outage` in its data): `dependency`, and
 * the start of the first failed attempt — an earlier mark's start is kept. Returns the mark.
 */
export async function markOutage(job: Job, dependency: Dependency, sinceMs: number): Promise<OutageMark> {
  const prior = (job.data as { outage?: OutageMark }).outage;
  const mark: OutageMark = { dependency, sinceMs: prior?.sinceMs ?? sinceMs };
  await job.updateData({ ...(job.data as Record<string, unknown>), outage: mark });
  return mark;
}

/** When to look again: half the outage so far, between 0.5 s and {@link OUTAGE_RECHECK_CAP_MS}. */
export function outageRecheckDelayMs(mark: OutageMark, nowMs = Date.now()): number {
  return Math.min(OUTAGE_RECHECK_CAP_MS, Math.max(500, Math.round((nowMs - mark.sinceMs) / 2)));
}

/**
 * Runs one attempt of a queue job (`run`). When it fails because a dependency is unavailable
 * (see {@link unavailableDependency}), the job is held instead of failed: its data keeps the
 * outage (`outage`: the dependency and the start of the first failed attempt), and it moves to
 * the delayed set without using one of its attempts, to run again after
 * {@link outageRecheckDelayMs}. The consumer's next attempt credits the wait and stops the run
 * past the ceiling (`checkWorkingTime` in the ledger). `onHeld` may then note the wait (its
 * failure is logged, not thrown). Any other error is rethrown unchanged.
 * @throws DelayedError when the job was held (BullMQ's signal that the job was moved, not failed).
 */
export async function holdWhileUnavailable<T>(
  job: Job,
  log: Logger,
  run: () => Promise<T>,
  onHeld?: (mark: OutageMark) => Promise<void>,
): Promise<T> {
  const attemptStartedMs = Date.now();
  try {
    return await run();
  } catch (err) {
    const dependency = unavailableDependency(err);
    if (!dependency || !job.token) throw err;
    const mark = await markOutage(job, dependency, attemptStartedMs);
    const delayMs = outageRecheckDelayMs(mark);
    await job.moveToDelayed(Date.now() + delayMs, job.token);
    log.warn(
      {
        queue: job.queueName,
        jobId: job.id,
        dependency,
        outageMs: Date.now() - mark.sinceMs,
        recheckMs: delayMs,
        err: (err as Error).message,
      },
      'dependency unavailable: job held',
    );
    // Best effort (the ledger may be the dependency that is down): say why the run waits.
    await onHeld?.(mark).catch((e: unknown) => log.debug({ jobId: job.id, err: (e as Error).message }, 'outage note not written'));
    throw new DelayedError(`held for ${dependency}`);
  }
}
