import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { repoRoot } from '@gatehouse/contracts';

/** The rule ids of the support pack, in the order of docs/product/policy-rules.md#support-rules. */
export const SUPPORT_RULE_IDS = ['R0', 'R1', 'R2', 'R3', 'R4', 'R5', 'R6', 'R7', 'R8', 'R9', 'R10'] as const;
export type SupportRuleId = (typeof SUPPORT_RULE_IDS)[number];

/** The rules every support bundle runs (R0–R9, `support-p1` onward); each appears exactly once in its `ruleOrder`. */
export const BASE_SUPPORT_RULE_IDS: readonly SupportRuleId[] = SUPPORT_RULE_IDS.filter((id) => id !== 'R10');

/**
 * Rules a bundle may add to the base set, each with the limit it needs in `limits`: R10, the
 * tenant's daily refund cap (`support-p2` onward, docs/decisions/0190-tenant-daily-refund-cap.md).
 */
const OPTIONAL_SUPPORT_RULES = { R10: 'tenantRolling24hCents' } as const;

/** A support policy bundle as stored in `policy/<revision>.json`; limits in integer cents. */
export const SupportBundleSchema = z
  .strictObject({
    revision: z.string().regex(/^[a-z0-9-]+$/),
    pack: z.literal('support'),
    description: z.string(),
    limits: z.strictObject({
      maxRefundCents: z.number().int().positive(),
      autoApproveLimitCents: z.number().int().nonnegative(),
      userRolling24hCents: z.number().int().positive(),
      agentRolling1hCents: z.number().int().positive(),
      reshipApprovalPaidAboveCents: z.number().int().nonnegative(),
      /**
       * R10: every tenant's refunds over the rolling 24 hours, at most this (integer cents) — the
       * default, and the ceiling of a tenant's own `refundCap24hCents` in the directory. Present
       * exactly when `ruleOrder` holds R10.
       */
      tenantRolling24hCents: z.number().int().positive().optional(),
    }),
    approval: z.strictObject({
      /**
       * Approval lifetime, seconds (docs/product/policy-rules.md#approvals: 15 minutes). A longer
       * one is a loosening that takes a second person at activation (ADR 0230); over a day is
       * refused outright, as the units slip it most likely is (milliseconds written as seconds).
       */
      ttlSeconds: z.number().int().positive().max(86_400),
      /** Support actions are approved by a lead (docs/product/policy-rules.md#approvals); no bundle names another role. */
      approverRole: z.literal('lead'),
      sameRegion: z.boolean(),
    }),
    /** Every base rule (R0–R9) exactly once, plus each optional rule the bundle runs (R10), in evaluation order. */
    ruleOrder: z.array(z.enum(SUPPORT_RULE_IDS)),
  })
  .superRefine((b, ctx) => {
    const seen = new Set(b.ruleOrder);
    if (seen.size !== b.ruleOrder.length) ctx.addIssue({ code: 'custom', path: ['ruleOrder'], message: 'a rule appears twice' });
    for (const id of BASE_SUPPORT_RULE_IDS) {
      if (!seen.has(id)) ctx.addIssue({ code: 'custom', path: ['ruleOrder'], message: `rule ${id} is missing` });
    }
    for (const [id, limit] of Object.entries(OPTIONAL_SUPPORT_RULES)) {
      if (seen.has(id as SupportRuleId) !== (b.limits[limit] !== undefined)) {
        ctx.addIssue({ code: 'custom', path: ['limits', limit], message: `${id} in ruleOrder needs limits.${limit}, and only then` });
      }
    }
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

/** The rule ids of the change pack (change-c1), in evaluation order. */
export const CHANGE_RULE_IDS = ['C0', 'C1', 'C2', 'C3', 'C4', 'C5'] as const;
export type ChangeRuleId = (typeof CHANGE_RULE_IDS)[number];

/**
 * A change policy bundle (`policy/change-<n>.json`, docs/product/users-and-tools.md#change-pack): the environments the
 * pack may touch, and the approval of `schedule_change` — exact, single use, at most 600 s old,
 * granted by a `change_owner` of the tenant.
 */
export const ChangeBundleSchema = z.strictObject({
  revision: z.string().regex(/^[a-z0-9-]+$/),
  pack: z.literal('change'),
  description: z.string(),
  limits: z.strictObject({
    /** Environments a change may be scheduled in (docs/product/policy-rules.md#c3: `staging`). */
    environments: z.array(z.string()).min(1),
  }),
  approval: z.strictObject({
    /** Approval lifetime, seconds (docs/product/policy-rules.md#approvals: at most 600 s). */
    ttlSeconds: z.number().int().positive().max(600),
    approverRole: z.literal('change_owner'),
    sameRegion: z.boolean(),
  }),
  ruleOrder: z.array(z.enum(CHANGE_RULE_IDS)).length(CHANGE_RULE_IDS.length),
});
export type ChangeBundle = z.infer<typeof ChangeBundleSchema>;

/** A bundle of either pack. */
export type PolicyBundle = SupportBundle | ChangeBundle;

/** The active bundle of each pack, as a service holds them. */
export interface PolicyBundles {
  support: SupportBundle;
  change: ChangeBundle;
}

const AnyBundleSchema = z.discriminatedUnion('pack', [SupportBundleSchema, ChangeBundleSchema]);

/**
 * Loads a bundle of either pack from a file path (the `pack` field decides the schema).
 * @throws Error when the file is missing or fails its pack's schema.
 */
export function loadBundleFile(path: string): PolicyBundle {
  const parsed = AnyBundleSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 10).map((i) => `  ${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new Error(`policy bundle ${path} is invalid:\n${issues.join('\n')}`);
  }
  return parsed.data;
}

/**
 * Loads `policy/<revision>.json` (or from `dir`) of either pack.
 * @throws Error when the file is missing, fails its schema or names another revision.
 */
export function loadBundle(revision: string, dir = resolve(repoRoot, 'policy')): PolicyBundle {
  const bundle = loadBundleFile(resolve(dir, `${revision}.json`));
  if (bundle.revision !== revision) throw new Error(`bundle file ${revision}.json names revision ${bundle.revision}`);
  return bundle;
}
