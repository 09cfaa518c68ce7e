export * from './user-token.ts';
export * from './delegated-token.ts';
