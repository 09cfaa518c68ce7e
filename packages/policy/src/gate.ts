import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { loadWorld, repoRoot, type World } from '@gatehouse/contracts';
import { findTool, supportTools } from '@gatehouse/tools';
import { loadSupportBundle, type SupportBundle } from './bundle.ts';
import { eligibleTools } from './eligibility.ts';
import { evaluateSupport, type PolicyDecision, type SupportFacts } from './support.rules.ts';

/** One boundary case: inputs (money in integer cents) and the decision SPEC §3 requires. */
export const BoundaryCaseSchema = z.strictObject({
  name: z.string(),
  tool: z.string(),
  user: z.string(),
  order: z.string(),
  mode: z.enum(['investigate', 'act']).default('act'),
  amountCents: z.number().int().optional(),
  priorRefundsOnOrderCents: z.number().int().nonnegative().default(0),
  userRefunds24hCents: z.number().int().nonnegative().default(0),
  agentRefunds1hCents: z.number().int().nonnegative().default(0),
  orderOverride: z.strictObject({ paid: z.number().int().optional(), status: z.string().optional() }).optional(),
  expect: z.strictObject({ decision: z.enum(['ALLOW', 'DENY', 'REQUIRE_APPROVAL']), ruleId: z.string() }),
});
export type BoundaryCase = z.infer<typeof BoundaryCaseSchema>;

const CaseFileSchema = z.strictObject({ pack: z.string(), description: z.string(), cases: z.array(BoundaryCaseSchema).min(1) });

/** Loads the boundary-case table every bundle of `pack` must pass (`policy/cases/<pack>.cases.json`). */
export function loadBoundaryCases(pack: string, dir = resolve(repoRoot, 'policy/cases')): BoundaryCase[] {
  return CaseFileSchema.parse(JSON.parse(readFileSync(resolve(dir, `${pack}.cases.json`), 'utf8'))).cases;
}

/** A case whose decision differs from the table. */
export interface GateFailure {
  name: string;
  expected: BoundaryCase['expect'];
  got: Pick<PolicyDecision, 'decision' | 'ruleId'>;
}

/** Builds the facts of one case from world.json (the same shape the gateway loads). */
export function caseFacts(c: BoundaryCase, world: World = loadWorld()): SupportFacts {
  const tool = findTool(c.tool);
  if (!tool) throw new Error(`case "${c.name}": unknown tool ${c.tool}`);
  const u = world.users.find((x) => x.id === c.user);
  const o = world.orders.find((x) => x.id === c.order);
  return {
    user: u ? { id: u.id, tenant: u.tenant, region: u.region ?? null, scopes: u.scopes ?? [] } : null,
    agentGrantedTools: world.agent.grantedTools,
    eligibleTools: eligibleTools(supportTools, { mode: c.mode, state: 'investigating' }, world.agent.grantedTools).map((t) => t.name),
    tool: { name: tool.name, scope: tool.scope },
    args: { orderId: c.order, ...(c.amountCents !== undefined ? { amountCents: c.amountCents } : {}) },
    order: o
      ? { id: o.id, tenant: o.tenant, region: o.region, paid: c.orderOverride?.paid ?? o.paid, status: c.orderOverride?.status ?? o.status }
      : null,
    priorRefundsOnOrderCents: c.priorRefundsOnOrderCents,
    userRefunds24hCents: c.userRefunds24hCents,
    agentRefunds1hCents: c.agentRefunds1hCents,
  };
}

/**
 * The boundary-case gate: evaluates every case against `bundle` and returns the ones whose
 * decision or rule differs. An empty list means the bundle may be activated.
 */
export function runBoundaryGate(bundle: SupportBundle, cases: BoundaryCase[] = loadBoundaryCases(bundle.pack)): GateFailure[] {
  const world = loadWorld();
  const failures: GateFailure[] = [];
  for (const c of cases) {
    const got = evaluateSupport(caseFacts(c, world), bundle);
    if (got.decision !== c.expect.decision || got.ruleId !== c.expect.ruleId) {
      failures.push({ name: c.name, expected: c.expect, got: { decision: got.decision, ruleId: got.ruleId } });
    }
  }
  return failures;
}

/**
 * Loads a bundle only if it passes its pack's gate (what a service does at boot).
 * @throws Error listing the failing cases.
 */
export function assertGatePasses(bundle: SupportBundle): SupportBundle {
  const failures = runBoundaryGate(bundle);
  if (failures.length) {
    throw new Error(
      `policy bundle ${bundle.revision} fails its boundary-case gate:\n${failures.map((f) => `  ${f.name}: expected ${f.expected.decision} ${f.expected.ruleId}, got ${f.got.decision} ${f.got.ruleId}`).join('\n')}`,
    );
  }
  return bundle;
}

/**
 * The bundle a service runs with: `policy/<revision>.json` (or `dir`), refused at boot unless it
 * passes its boundary-case gate — a bundle with a units mistake can never become active.
 * @throws Error naming the failing cases.
 */
export function loadActiveSupportBundle(revision: string, dir?: string): SupportBundle {
  return assertGatePasses(loadSupportBundle(revision, dir));
}
