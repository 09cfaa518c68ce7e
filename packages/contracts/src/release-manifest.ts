import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { repoRoot } from './world.ts';

/** Run budgets of one pack: checked before every dispatch (docs/product/invariants.md#bounds). */
export const PackBudgetsSchema = z.strictObject({
  maxRounds: z.number().int().positive(),
  /** Tool calls, failed validations included. */
  maxToolCalls: z.number().int().positive(),
  /** The run's own working time, seconds (waiting for a person does not count). */
  wallTimeSeconds: z.number().int().positive(),
  /** Model spend, micro-US-dollars, priced by the release's model entry. */
  maxSpendMicroUsd: z.number().int().positive(),
});
export type PackBudgets = z.infer<typeof PackBudgetsSchema>;

/**
 * Canary thresholds of a release (docs/decisions/0210-canary-analysis.md): how far its cohort's
 * runs may fall behind the baseline release's runs in the same window before `release analyze`
 * fails it. Safety measures (unsafe proposals per run, failed_unknown per run) have no
 * tolerance: the candidate may not be above the baseline at all.
 */
export const CanaryThresholdsSchema = z.strictObject({
  /** Terminal runs each side needs before a verdict (fewer: `insufficient`, which refuses like a failure). */
  minRuns: z.number().int().positive(),
  /** Largest drop in the share of runs that completed, absolute (0.05 = five points). */
  maxTaskSuccessDrop: z.number().min(0).max(1),
  /** Largest ratio of the candidate's p95 time to a terminal state to the baseline's. */
  maxP95TerminalRatio: z.number().positive(),
  /** Largest increase in the share of runs stopped by an error (step_failed, dependency_unavailable, audit_unavailable, model_error), absolute. */
  maxErrorRateIncrease: z.number().min(0).max(1),
  /** Largest ratio of the candidate's mean model spend per run to the baseline's. */
  maxCostPerRunRatio: z.number().positive(),
});
export type CanaryThresholds = z.infer<typeof CanaryThresholdsSchema>;

/** Thresholds for a manifest that names none. */
export const DEFAULT_CANARY_THRESHOLDS: CanaryThresholds = {
  minRuns: 10,
  maxTaskSuccessDrop: 0.05,
  maxP95TerminalRatio: 1.5,
  maxErrorRateIncrease: 0.02,
  maxCostPerRunRatio: 1.25,
};

const perPack = <T extends z.ZodType>(t: T) => z.strictObject({ support: t, change: t });
const sha256 = z.string().regex(/^[0-9a-f]{64}$/);

/**
 * A release bundle (`releases/<id>.json`, docs/product/releases.md): every part that changes behaviour, named or
 * digested — the model with its token prices (micro-USD per 1000 tokens), the instructions'
 * sha256 per pack, the tool catalog digest per pack, the policy revision per pack, retry rules,
 * adapter versions, the database schema version (the newest migration it needs), the audit
 * event schema digest, the job payload version its workers accept, and the budgets per pack.
 * `gatehouse release activate` recomputes every digest from the code and refuses a mismatch.
 */
export const ReleaseManifestSchema = z.strictObject({
  id: z.string().regex(/^[a-z0-9-]+$/),
  description: z.string().optional(),
  model: z.strictObject({
    name: z.string(),
    inputMicroUsdPer1kTokens: z.number().nonnegative(),
    outputMicroUsdPer1kTokens: z.number().nonnegative(),
  }),
  prompt: perPack(sha256),
  toolCatalog: perPack(sha256),
  policy: perPack(z.string()),
  retry: z.strictObject({
    /** Attempts at most for idempotent writes (payments, change service). */
    idempotentWriteMaxAttempts: z.number().int().positive(),
    /** Attempts at most for bounded reads. */
    readMaxAttempts: z.number().int().positive(),
  }),
  adapters: z.record(z.string(), z.string()),
  /** Name of the newest migration this release needs (it must be applied before activation). */
  schemaVersion: z.string(),
  auditSchema: sha256,
  /** Version of the job payloads its workers accept; requeue needs equal versions. */
  payloadVersion: z.number().int().positive(),
  budgets: z.strictObject({ support: PackBudgetsSchema, change: PackBudgetsSchema }),
  /** Canary thresholds; {@link DEFAULT_CANARY_THRESHOLDS} when absent. */
  canary: CanaryThresholdsSchema.optional(),
});
export type ReleaseManifest = z.infer<typeof ReleaseManifestSchema>;

/** Folder of release manifests: `RELEASES_DIR` when set (tests, operators' own bundles), else the repository's `releases/`. */
export function releasesDir(): string {
  return process.env.RELEASES_DIR ?? resolve(repoRoot, 'releases');
}

/**
 * Loads `releases/<id>.json` (or from `dir`, default {@link releasesDir}).
 * @throws Error when missing, invalid, or naming another id.
 */
export function loadReleaseManifest(id: string, dir = releasesDir()): ReleaseManifest {
  const file = resolve(dir, `${id}.json`);
  if (!existsSync(file)) throw new Error(`no release manifest ${id} (looked for ${file}); a candidate needs its manifest in ${dir}`);
  const m = ReleaseManifestSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  if (m.id !== id) throw new Error(`release file ${id}.json names release ${m.id}`);
  return m;
}

/** Cost of one model response in micro-USD under the release's model entry (rounded up). */
export function modelSpendMicroUsd(model: ReleaseManifest['model'], usage: { input_tokens: number; output_tokens: number }): number {
  return Math.ceil((usage.input_tokens * model.inputMicroUsdPer1kTokens + usage.output_tokens * model.outputMicroUsdPer1kTokens) / 1000);
}

/**
 * Every release manifest in `releases/` (or `dir`), by id.
 * @throws Error when one is invalid.
 */
export function listReleaseManifests(dir = releasesDir()): ReleaseManifest[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => loadReleaseManifest(f.replace(/\.json$/, ''), dir));
}
