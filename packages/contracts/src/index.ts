export * from './world.ts';
export * from './canonical-json.ts';
export * from './queues/index.ts';
export * from './audit-event.ts';
export * from './api.ts';
export * from './release-manifest.ts';
export * from './reconciliation.ts';
export * from './text.ts';
