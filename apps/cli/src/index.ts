export * from './stack.ts';
export * from './stack-control.ts';
export * from './demo.ts';
export * from './api-client.ts';
export * from './db-admin.ts';
export * from './audit-key.ts';
export { auditReplaceLostKeyCommand } from './audit-rotate-command.ts';
