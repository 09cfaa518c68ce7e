import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';

/** `turns`: run model round `round` of a workflow (consumer: agent-loop). */
export const TurnJobSchema = z.object({
  ...jobEnvelope,
  workflowId: z.uuid(),
  /** 1-based model round this job runs. */
  round: z.number().int().positive(),
});
export type TurnJob = z.infer<typeof TurnJobSchema>;

export const turnsQueue: QueueContract<TurnJob> = {
  base: 'turns',
  jobName: 'turn',
  schema: TurnJobSchema,
  jobId: (p) => `turn_${p.workflowId}_r${p.round}`,
  options: defaultJobOptions,
};
