/**
 * `@gatehouse/operations`: the on-call operations that write the ledger, each audited and
 * refused with a typed error (docs/decisions/0330-layout.md) — operator authority, the tool
 * switch and the credential epoch; release activation, rollback and enabling writes with the
 * canary analysis, the two-person rule and overrides; requeue, drain and quarantine of a
 * release's queues. `apps/cli` parses arguments and prints; the ops service may call the same
 * functions. Reconciliation repairs and the change cancel are `@gatehouse/reconciliation`.
 */
export * from './ops.ts';
export * from './releases.ts';
export * from './retire.ts';
export * from './queue-ops.ts';
export * from './canary.ts';
export * from './overrides.ts';
export * from './two-person.ts';
export * from './reenable.ts';
export * from './cohort.ts';
export * from './user-tokens.ts';
export * from './audit-key.ts';
export * from './audit-loss.ts';
