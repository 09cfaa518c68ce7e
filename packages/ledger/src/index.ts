export * from './schema.ts';
export * from './db.ts';
export * from './outbox.ts';
export * from './audit.ts';
export * from './audit-chain.ts';
export * from './audit-verify.ts';
export * from './releases.ts';
export * from './operations.ts';
