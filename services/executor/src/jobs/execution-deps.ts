import type { DelegationSigningKey } from '@gatehouse/credentials';
import type { AuditGate, Db, OutagePolicy } from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import type { PolicyBundles } from '@gatehouse/policy';
import type { TestHooks } from '../domain/test-hooks.ts';

/** Dependencies of `processExecution` and of each of its steps. */
export interface ExecutionDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  stagingUrl: string;
  /** Ed25519 key minting delegated tokens (only the minting side holds it). */
  signingKey: DelegationSigningKey;
  auditHmacKey: string;
  /** Lease length, ms; longer than the adapter deadline. */
  leaseMs: number;
  /** Adapter deadline per execution, ms. */
  deadlineMs: number;
  agentId: string;
  /**
   * Fault hooks set only by tests (crash points, blocking, control removals): ONE object, read
   * from the environment once at boot (`readTestHooks`, refused outside GATEHOUSE_ENV=test) and
   * passed to every step.
   */
  hooks: TestHooks;
  /** Active policy bundle of each pack, for the re-evaluation at execution. */
  bundles: PolicyBundles;
  /** Audit-health thresholds checked before any consequential step. */
  auditGate: AuditGate;
  /** Outage ceiling and crediting (the wait for an unavailable dependency is not working time). */
  outagePolicy: OutagePolicy;
}
