import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';

/**
 * `reconcile`: one reconciliation pass (docs/product/reconciliation.md; consumer: executor). Added by the repeatable
 * job scheduler every `RECONCILE_INTERVAL_MS`, or on demand.
 */
export const ReconcileJobSchema = z.object({
  ...jobEnvelope,
  trigger: z.enum(['schedule', 'manual']),
});
export type ReconcileJob = z.infer<typeof ReconcileJobSchema>;

export const reconcileQueue: QueueContract<ReconcileJob> = {
  base: 'reconcile',
  jobName: 'reconcile',
  schema: ReconcileJobSchema,
  jobId: (p) => `reconcile_${p.trigger}`,
  // A pass that failed (a system of record unreachable) is simply the next pass's work.
  options: { ...defaultJobOptions, attempts: 1, removeOnComplete: { age: 3600, count: 100 }, removeOnFail: { age: 24 * 3600 } },
};
