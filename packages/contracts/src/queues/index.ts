export * from './common.ts';
export * from './turns.ts';
export * from './proposals.ts';
export * from './approval-requests.ts';
export * from './executions.ts';
export * from './results.ts';
