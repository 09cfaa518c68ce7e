import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

/** Repository root (the folder holding `pnpm-workspace.yaml`). */
export const repoRoot: string = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

const UserSchema = z.object({
  id: z.string(),
  tenant: z.string(),
  role: z.enum(['rep', 'lead', 'operator', 'policy_owner', 'engineer', 'change_owner']),
  region: z.string().optional(),
  scopes: z.array(z.string()).optional(),
  /** Largest single refund the user may delegate, integer cents. */
  refundCeiling: z.number().int().nonnegative().optional(),
  /** Largest refund a lead may approve, integer cents. */
  approveLimit: z.number().int().nonnegative().optional(),
});

const OrderSchema = z.object({
  id: z.string(),
  tenant: z.string(),
  region: z.string(),
  customer: z.string(),
  /** Amount paid for the order, integer cents. */
  paid: z.number().int().nonnegative(),
  status: z.string(),
});

/**
 * Ids that appear more than once in `items`, in first-seen order (each named once).
 */
function repeatedIds(items: ReadonlyArray<{ id: string }>): string[] {
  const seen = new Set<string>();
  const repeated = new Set<string>();
  for (const { id } of items) (seen.has(id) ? repeated : seen).add(id);
  return [...repeated];
}

/**
 * Shape of `synthetic-world/world.json`: the synthetic tenants, people, orders and changes. A
 * user id is one person across the directory: the cohorts of a release and of a staged re-enable
 * (`user:<id>`), token revocation and the operator's tenant all name a user by id alone, so the
 * same id in two tenants would let one tenant's cohort admit the other's user
 * (docs/decisions/0766-a-user-id-is-unique-across-the-directory.md). Tenant ids are unique too.
 */
export const WorldSchema = z
  .object({
    agent: z.object({ id: z.string(), grantedTools: z.array(z.string()) }),
    tenants: z.array(
      z.object({
        id: z.string(),
        name: z.string(),
        regions: z.array(z.string()),
        /**
         * The tenant's own daily refund cap (R10), integer cents: applies when below the bundle's
         * `tenantRolling24hCents`, which stays the ceiling (docs/decisions/0190-tenant-daily-refund-cap.md).
         */
        refundCap24hCents: z.number().int().positive().optional(),
      }),
    ),
    users: z.array(UserSchema),
    orders: z.array(OrderSchema),
    customers: z.array(z.object({ id: z.string(), email: z.string() })),
    changes: z.array(
      z.object({
        id: z.string(),
        tenant: z.string(),
        environment: z.string(),
        service: z.string(),
        summary: z.string(),
        risk: z.string(),
      }),
    ),
    sampleTickets: z.array(z.object({ ticketId: z.string(), user: z.string(), text: z.string() })),
  })
  .superRefine((w, ctx) => {
    for (const id of repeatedIds(w.users))
      ctx.addIssue({
        code: 'custom',
        path: ['users'],
        message: `user id ${JSON.stringify(id)} appears more than once: a user id names one person across every tenant`,
      });
    for (const id of repeatedIds(w.tenants))
      ctx.addIssue({ code: 'custom', path: ['tenants'], message: `tenant id ${JSON.stringify(id)} appears more than once` });
  });

export type World = z.infer<typeof WorldSchema>;
export type WorldUser = z.infer<typeof UserSchema>;
export type WorldOrder = z.infer<typeof OrderSchema>;

/** The synthetic world shipped with the repository (the demo, tests and benchmarks run on it). */
export const DEFAULT_WORLD_PATH: string = resolve(repoRoot, 'synthetic-world/world.json');

/** Parsed worlds by absolute path: each file is read and validated once per process. */
const cache = new Map<string, World>();

/**
 * Loads and validates the synthetic world, once per path per process. Path: the argument, else
 * `GATEHOUSE_WORLD`, else {@link DEFAULT_WORLD_PATH} inside the repository. Nothing outside the
 * repository is read unless `GATEHOUSE_WORLD` points there.
 * @throws Error when the file is missing, or does not match {@link WorldSchema} (naming the file and each issue's path).
 */
export function loadWorld(path = process.env.GATEHOUSE_WORLD): World {
  const file = resolve(path || DEFAULT_WORLD_PATH);
  let world = cache.get(file);
  if (!world) {
    const parsed = WorldSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    if (!parsed.success)
      throw new Error(
        `the directory at ${file} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`,
      );
    world = parsed.data;
    cache.set(file, world);
  }
  return world;
}
