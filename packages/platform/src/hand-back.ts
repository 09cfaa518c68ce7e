import { DelayedError, type Job } from 'bullmq';

/**
 * Hands `job` back to its queue unattempted: moved to the delayed set for `delayMs` (ms) under the
 * worker's lock `token`, without consuming an attempt, so a gate's hold can never push a run into
 * the dead letter (the Postgres gate's deferral, the drain gate's hold, a service's `JobHold`).
 * `why` names the hold in the error BullMQ logs.
 * @throws DelayedError always — the processor must let it propagate (BullMQ's protocol for a job
 *   that moved itself to delayed).
 */
export async function handBack(job: Job, token: string | undefined, delayMs: number, why: string): Promise<never> {
  await job.moveToDelayed(Date.now() + delayMs, token);
  throw new DelayedError(why);
}
