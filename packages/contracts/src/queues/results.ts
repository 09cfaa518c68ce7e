import { z } from 'zod';
import { defaultJobOptions, jobEnvelope, type QueueContract } from './common.ts';
import { RESULT_STOP_REASONS } from '../stop-reasons.ts';

/**
 * `results`: the final outcome of one function_call, already reduced to its model-safe form
 * (consumer: agent-loop, which answers the call with a Responses API `function_call_output`).
 */
export const ResultJobSchema = z.object({
  ...jobEnvelope,
  workflowId: z.uuid(),
  callId: z.string().min(1),
  /** Model-safe output (bounded, redacted, labelled); serialized into `output`. */
  output: z.record(z.string(), z.unknown()),
  /** Set when the outcome parks the workflow (e.g. `needs_reconciliation`). */
  park: z.enum(['needs_reconciliation']).optional(),
  /** Set when the outcome stops the workflow (docs/product/states.md#stop-reasons). */
  stop: z.enum(RESULT_STOP_REASONS).optional(),
});
export type ResultJob = z.infer<typeof ResultJobSchema>;

export const resultsQueue: QueueContract<ResultJob> = {
  base: 'results',
  jobName: 'result',
  schema: ResultJobSchema,
  jobId: (p) => `result_${p.workflowId}_${p.callId}`,
  options: defaultJobOptions,
};
