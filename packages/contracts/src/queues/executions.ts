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
  /**
   * Set when on-call resumes a held execution (tool switched back on): a new job id, because the
   * queue keeps the id of the job that was held and would drop a re-add with the same id.
   */
  resumeSeq: z.number().int().positive().optional(),
});
export type ExecutionJob = z.infer<typeof ExecutionJobSchema>;

export const executionsQueue: QueueContract<ExecutionJob> = {
  base: 'executions',
  jobName: 'execution',
  schema: ExecutionJobSchema,
  jobId: (p) => `exec_${p.actionId}_v${p.actionVersion}${p.resumeSeq ? `_resume${p.resumeSeq}` : ''}`,
  // A busy lease is retried with backoff until the holder finishes or its lease expires.
  options: { ...defaultJobOptions, attempts: 12, backoff: { type: 'exponential', delay: 500 } },
};
