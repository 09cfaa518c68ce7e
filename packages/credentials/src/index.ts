export * from './user-token.ts';
export * from './delegated-token.ts';
export * from './signing-keys.ts';
