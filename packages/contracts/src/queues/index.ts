export * from './common.ts';
export * from './turns.ts';
export * from './proposals.ts';
export * from './approval-requests.ts';
export * from './executions.ts';
export * from './results.ts';
export * from './reconcile.ts';

import { turnsQueue } from './turns.ts';
import { proposalsQueue } from './proposals.ts';
import { approvalRequestsQueue } from './approval-requests.ts';
import { executionsQueue } from './executions.ts';
import { resultsQueue } from './results.ts';
import { reconcileQueue } from './reconcile.ts';
import { defaultJobOptions } from './common.ts';

/** Every queue contract, by base name. */
export const queueContracts = {
  turns: turnsQueue,
  proposals: proposalsQueue,
  'approval-requests': approvalRequestsQueue,
  executions: executionsQueue,
  results: resultsQueue,
  reconcile: reconcileQueue,
} as const;

/** Job options for a release-specific queue name (`<base>.<release>`; base names have no dot). */
export function jobOptionsFor(queue: string): (typeof executionsQueue)['options'] {
  const base = queue.split('.')[0] as keyof typeof queueContracts;
  return queueContracts[base]?.options ?? defaultJobOptions;
}
