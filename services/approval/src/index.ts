/**
 * `@gatehouse/approval`: the approval API's app factory, the decision it records and its jobs, for
 * in-process tests. The process itself is `src/main.ts` (port 7102).
 */
export { createApprovalApp, type ApprovalAppOptions } from './http/app.ts';
export { decideApproval, type DecisionOutcome } from './domain/decide.ts';
export { sweepExpiredApprovals } from './jobs/expiry.sweep.ts';
export { processApprovalRequest } from './jobs/approval-requests.processor.ts';
