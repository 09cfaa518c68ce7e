export * from './bundle.ts';
export * from './support.rules.ts';
export * from './eligibility.ts';
export * from './gate.ts';
export * from './facts.ts';
export * from './record-decision.ts';
export * from './change.rules.ts';
export * from './evaluate.ts';
