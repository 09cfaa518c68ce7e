import { resolve } from 'node:path';
import { z } from 'zod';
import { anchorWitnessProblems, auditAnchorEnv, ed25519KeyFileProblems } from '@gatehouse/platform';
import { repoRoot } from '@gatehouse/contracts';

/** The audit service's settings besides the base ones (intervals in ms). */
export const auditEnvShape = {
  AUDIT_PORT: z.coerce.number().int().min(0).max(65535).default(7113),
  /** How often the outbox is drained into the chain, ms. */
  AUDIT_CHAIN_INTERVAL_MS: z.coerce.number().int().positive().default(200),
  // Anchoring interval and slack, and the anchor witness outside Postgres (ADR 0570).
  ...auditAnchorEnv,
  AUDIT_SIGNING_KEY_PATH: z.string().default(resolve(repoRoot, '.gatehouse/audit-ed25519.pem')),
  /** How often the invariant monitors run, ms. */
  MONITOR_INTERVAL_MS: z.coerce.number().int().positive().default(30_000),
  /** Optional webhook receiving fired alerts as JSON. */
  ALERT_WEBHOOK_URL: z.string().url().optional(),
  MONITOR_AUTO_APPROVE_LIMIT_CENTS: z.coerce.number().int().nonnegative().default(5000),
  MONITOR_MAX_FAILED_UNKNOWN_PER_HOUR: z.coerce.number().int().nonnegative().default(3),
};

/**
 * The audit service's production refusals (`parseEnv`'s `productionChecks`), as `NAME: problem`
 * lines: the anchoring key must come from the secret store (docs/decisions/0180-strict-production-mode.md)
 * and the anchor witness must be configured (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md).
 * @param source the raw environment (tells a default key path from an explicit one).
 */
export function auditProductionProblems(
  env: { AUDIT_SIGNING_KEY_PATH: string; AUDIT_ANCHOR_WITNESS_PATH?: string | undefined },
  source: Record<string, string | undefined>,
): string[] {
  return [
    ...ed25519KeyFileProblems('AUDIT_SIGNING_KEY_PATH', env.AUDIT_SIGNING_KEY_PATH, source.AUDIT_SIGNING_KEY_PATH !== undefined),
    ...anchorWitnessProblems(env.AUDIT_ANCHOR_WITNESS_PATH),
  ];
}
