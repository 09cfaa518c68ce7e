import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { repoRoot } from './world.ts';

/** Run budgets of one pack: checked before every dispatch (SPEC §4 invariant 6). */
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
 * The part of a release manifest (`releases/<id>.json`) the runtime reads today: the model entry
 * with its token prices (micro-USD per 1000 tokens) and the budgets per pack.
 */
export const ReleaseManifestSchema = z.object({
  id: z.string(),
  description: z.string().optional(),
  model: z.strictObject({
    name: z.string(),
    inputMicroUsdPer1kTokens: z.number().nonnegative(),
    outputMicroUsdPer1kTokens: z.number().nonnegative(),
  }),
  budgets: z.strictObject({ support: PackBudgetsSchema, change: PackBudgetsSchema }),
});
export type ReleaseManifest = z.infer<typeof ReleaseManifestSchema>;

/**
 * Loads `releases/<id>.json` (or from `dir`).
 * @throws Error when missing, invalid, or naming another id.
 */
export function loadReleaseManifest(id: string, dir = resolve(repoRoot, 'releases')): ReleaseManifest {
  const m = ReleaseManifestSchema.parse(JSON.parse(readFileSync(resolve(dir, `${id}.json`), 'utf8')));
  if (m.id !== id) throw new Error(`release file ${id}.json names release ${m.id}`);
  return m;
}

/** Cost of one model response in micro-USD under the release's model entry (rounded up). */
export function modelSpendMicroUsd(model: ReleaseManifest['model'], usage: { input_tokens: number; output_tokens: number }): number {
  return Math.ceil((usage.input_tokens * model.inputMicroUsdPer1kTokens + usage.output_tokens * model.outputMicroUsdPer1kTokens) / 1000);
}
