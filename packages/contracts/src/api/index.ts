export * from './common.ts';
export * from './intake.ts';
export * from './approval.ts';
export * from './ops.ts';
