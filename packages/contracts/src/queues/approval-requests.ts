import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';

/** `approval-requests`: an action version that needs a human approval (consumer: approval). */
export const ApprovalRequestJobSchema = z.object({
  ...jobEnvelope,
  workflowId: z.uuid(),
  actionId: z.uuid(),
  actionVersion: z.number().int().positive(),
});
export type ApprovalRequestJob = z.infer<typeof ApprovalRequestJobSchema>;

export const approvalRequestsQueue: QueueContract<ApprovalRequestJob> = {
  base: 'approval-requests',
  jobName: 'approval-request',
  schema: ApprovalRequestJobSchema,
  jobId: (p) => `approval_${p.actionId}_v${p.actionVersion}`,
  options: defaultJobOptions,
};
