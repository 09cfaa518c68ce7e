/**
 * `@gatehouse/testing`: factories of ledger rows for tests (an action at any status, a finished
 * run, deadlock counters). The infrastructure they run on — databases, queue prefixes, ports,
 * private servers, the process stack — is `@gatehouse/test-harness`.
 */
export * from './factories.ts';
