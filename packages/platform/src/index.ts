export * from './logger.ts';
export * from './env.ts';
export * from './errors.ts';
export * from './http.ts';
export * from './shutdown.ts';
export * from './queues.ts';
export * from './outbox-relay.ts';
export * from './service-context.ts';
