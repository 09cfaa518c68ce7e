import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { repoRoot } from '@gatehouse/contracts';

/** The rule ids of the support pack, in SPEC §3 order. */
export const SUPPORT_RULE_IDS = ['R0', 'R1', 'R2', 'R3', 'R4', 'R5', 'R6', 'R7', 'R8', 'R9'] as const;
export type SupportRuleId = (typeof SUPPORT_RULE_IDS)[number];

/** A support policy bundle as stored in `policy/<revision>.json`; limits in integer cents. */
export const SupportBundleSchema = z.strictObject({
  revision: z.string().regex(/^[a-z0-9-]+$/),
  pack: z.literal('support'),
  description: z.string(),
  limits: z.strictObject({
    maxRefundCents: z.number().int().positive(),
    autoApproveLimitCents: z.number().int().nonnegative(),
    userRolling24hCents: z.number().int().positive(),
    agentRolling1hCents: z.number().int().positive(),
    reshipApprovalPaidAboveCents: z.number().int().nonnegative(),
  }),
  approval: z.strictObject({
    /** Approval lifetime, seconds (SPEC §3: 15 minutes). */
    ttlSeconds: z.number().int().positive(),
    approverRole: z.string(),
    sameRegion: z.boolean(),
  }),
  ruleOrder: z.array(z.enum(SUPPORT_RULE_IDS)).length(SUPPORT_RULE_IDS.length),
});
export type SupportBundle = z.infer<typeof SupportBundleSchema>;

/**
 * Loads `policy/<revision>.json` from the repository (or `dir`).
 * @throws Error when the file is missing or fails {@link SupportBundleSchema}.
 */
export function loadSupportBundle(revision: string, dir = resolve(repoRoot, 'policy')): SupportBundle {
  const bundle = loadSupportBundleFile(resolve(dir, `${revision}.json`));
  if (bundle.revision !== revision) throw new Error(`bundle file ${revision}.json names revision ${bundle.revision}`);
  return bundle;
}

/**
 * Loads a support bundle from a file path.
 * @throws Error when the file is missing or fails {@link SupportBundleSchema}.
 */
export function loadSupportBundleFile(path: string): SupportBundle {
  return SupportBundleSchema.parse(JSON.parse(readFileSync(path, 'utf8')));
}
