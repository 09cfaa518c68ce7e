import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';

/** `proposals`: a recorded function_call to validate and decide (consumer: policy-gateway). */
export const ProposalJobSchema = z.object({
  ...jobEnvelope,
  workflowId: z.uuid(),
  proposalId: z.uuid(),
  /** Responses API `call_id` of the function_call. */
  callId: z.string().min(1),
});
export type ProposalJob = z.infer<typeof ProposalJobSchema>;

export const proposalsQueue: QueueContract<ProposalJob> = {
  base: 'proposals',
  jobName: 'proposal',
  schema: ProposalJobSchema,
  jobId: (p) => `proposal_${p.proposalId}`,
  options: defaultJobOptions,
};
