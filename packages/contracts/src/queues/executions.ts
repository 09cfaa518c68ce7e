import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';

/** `executions`: execute one allowed or approved action version (consumer: executor). */
export const ExecutionJobSchema = z.object({
  ...jobEnvelope,
  workflowId: z.uuid(),
  actionId: z.uuid(),
  actionVersion: z.number().int().positive(),
  /** Approval to consume, when the action required one. */
  approvalId: z.uuid().nullable(),
});
export type ExecutionJob = z.infer<typeof ExecutionJobSchema>;

export const executionsQueue: QueueContract<ExecutionJob> = {
  base: 'executions',
  jobName: 'execution',
  schema: ExecutionJobSchema,
  jobId: (p) => `exec_${p.actionId}_v${p.actionVersion}`,
  // A busy lease is retried with backoff until the holder finishes or its lease expires.
  options: { ...defaultJobOptions, attempts: 12, backoff: { type: 'exponential', delay: 500 } },
};
