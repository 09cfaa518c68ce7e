import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { loadReleaseManifest, loadWorld, repoRoot, type World } from '@gatehouse/contracts';
import { releaseForced, type Db } from '@gatehouse/ledger';
import { changeTools, findTool, supportTools } from '@gatehouse/tools';
import { loadBundle, type ChangeBundle, type PolicyBundle, type PolicyBundles, type SupportBundle } from './bundle.ts';
import { evaluateChange, type ChangeFacts } from './change.rules.ts';
import { eligibleTools } from './eligibility.ts';
import { evaluateSupport, type PolicyDecision, type SupportFacts } from './support.rules.ts';

/** One boundary case: inputs (money in integer cents) and the decision docs/product/policy-rules.md requires. */
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
  /**
   * Every tenant's refunds over the rolling 24 h, by tenant id (R10): the case's facts take the
   * user's tenant's entry, so one table row can show another tenant's day leaves this one alone.
   */
  tenantRefunds24hCents: z.record(z.string(), z.number().int().nonnegative()).default({}),
  orderOverride: z.strictObject({ paid: z.number().int().optional(), status: z.string().optional() }).optional(),
  expect: z.strictObject({ decision: z.enum(['ALLOW', 'DENY', 'REQUIRE_APPROVAL']), ruleId: z.string() }),
});
export type BoundaryCase = z.infer<typeof BoundaryCaseSchema>;

/**
 * One change-pack boundary case: who proposes which tool in which workflow state, the change
 * (world.json id), and for `schedule_change` the plan this workflow prepared (null: none).
 */
export const ChangeBoundaryCaseSchema = z.strictObject({
  name: z.string(),
  tool: z.string(),
  user: z.string(),
  change: z.string(),
  state: z.enum(['received', 'investigating', 'awaiting_approval', 'executing']),
  mode: z.enum(['investigate', 'act']).default('act'),
  window: z.enum(['next-maintenance-window', 'manual-window']).default('next-maintenance-window'),
  note: z.string().nullable().default(null),
  plan: z.strictObject({ window: z.string(), note: z.string().nullable() }).nullable().default(null),
  environmentOverride: z.string().optional(),
  expect: z.strictObject({ decision: z.enum(['ALLOW', 'DENY', 'REQUIRE_APPROVAL']), ruleId: z.string() }),
});
export type ChangeBoundaryCase = z.infer<typeof ChangeBoundaryCaseSchema>;

const CaseFileSchema = z.discriminatedUnion('pack', [
  z.strictObject({ pack: z.literal('support'), description: z.string(), cases: z.array(BoundaryCaseSchema).min(1) }),
  z.strictObject({ pack: z.literal('change'), description: z.string(), cases: z.array(ChangeBoundaryCaseSchema).min(1) }),
]);

/** Loads the boundary-case table every bundle of `pack` must pass (`policy/cases/<pack>.cases.json`). */
export function loadBoundaryCases(pack: 'support', dir?: string): BoundaryCase[];
export function loadBoundaryCases(pack: 'change', dir?: string): ChangeBoundaryCase[];
export function loadBoundaryCases(pack: string, dir?: string): BoundaryCase[] | ChangeBoundaryCase[];
export function loadBoundaryCases(pack: string, dir = resolve(repoRoot, 'policy/cases')): BoundaryCase[] | ChangeBoundaryCase[] {
  return loadCaseFile(resolve(dir, `${pack}.cases.json`), pack);
}

/** Parses one case file and checks it holds cases of `pack`. */
function loadCaseFile(file: string, pack: string): BoundaryCase[] | ChangeBoundaryCase[] {
  const parsed = CaseFileSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  if (parsed.pack !== pack) throw new Error(`${file} holds cases of pack ${parsed.pack}, not ${pack}`);
  return parsed.cases;
}

/**
 * Every boundary case `bundle` must pass: its pack's table (the rules every revision shares), then
 * the revision's own table `policy/cases/<revision>.cases.json` when there is one — the cases of
 * rules only that revision runs (R10 in `support-p2`). Two tables so an older revision keeps its
 * gate unchanged while a newer one adds boundaries.
 * @throws Error when a table is missing (the pack's), invalid, or of another pack.
 */
export function loadGateCases(bundle: PolicyBundle, dir = resolve(repoRoot, 'policy/cases')): BoundaryCase[] | ChangeBoundaryCase[] {
  const own = resolve(dir, `${bundle.revision}.cases.json`);
  const shared = loadBoundaryCases(bundle.pack, dir);
  return existsSync(own) ? ([...shared, ...loadCaseFile(own, bundle.pack)] as typeof shared) : shared;
}

/** A case whose decision differs from the table. */
export interface GateFailure {
  name: string;
  expected: BoundaryCase['expect'];
  got: Pick<PolicyDecision, 'decision' | 'ruleId'>;
}

/** Builds the facts of one change-pack case from world.json (the shape the gateway loads). */
export function changeCaseFacts(c: ChangeBoundaryCase, world: World = loadWorld()): ChangeFacts {
  const tool = findTool(c.tool);
  if (!tool) throw new Error(`case "${c.name}": unknown tool ${c.tool}`);
  const u = world.users.find((x) => x.id === c.user);
  const ch = world.changes.find((x) => x.id === c.change);
  const schedule = tool.name === 'schedule_change';
  const planId = 'plan_0000000000000001';
  return {
    user: u ? { id: u.id, tenant: u.tenant, region: u.region ?? null, scopes: u.scopes ?? [] } : null,
    agentGrantedTools: world.agent.grantedTools,
    eligibleTools: eligibleTools(changeTools, { mode: c.mode, state: c.state }, world.agent.grantedTools).map((t) => t.name),
    tool: { name: tool.name, scope: tool.scope },
    args: schedule ? { planId, window: c.window, note: c.note } : { changeId: c.change, window: c.window, note: c.note },
    change: ch
      ? { id: ch.id, tenant: ch.tenant, environment: c.environmentOverride ?? ch.environment, service: ch.service, risk: ch.risk }
      : null,
    plan: schedule && c.plan ? { id: planId, changeId: c.change, window: c.plan.window, note: c.plan.note } : null,
  };
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
    tenantRefunds24hCents: u ? (c.tenantRefunds24hCents[u.tenant] ?? 0) : 0,
    tenantRefundCap24hCents: (u && world.tenants.find((t) => t.id === u.tenant)?.refundCap24hCents) ?? null,
  };
}

/**
 * The boundary-case gate: evaluates every case of the bundle ({@link loadGateCases}) against `bundle` and
 * returns the ones whose decision or rule differs. An empty list means the bundle may be
 * activated.
 */
export function runBoundaryGate(bundle: PolicyBundle, cases?: BoundaryCase[] | ChangeBoundaryCase[]): GateFailure[] {
  const world = loadWorld();
  const failures: GateFailure[] = [];
  const check = (name: string, expected: BoundaryCase['expect'], got: PolicyDecision) => {
    if (got.decision !== expected.decision || got.ruleId !== expected.ruleId) {
      failures.push({ name, expected, got: { decision: got.decision, ruleId: got.ruleId } });
    }
  };
  if (bundle.pack === 'support') {
    for (const c of (cases as BoundaryCase[] | undefined) ?? (loadGateCases(bundle) as BoundaryCase[])) {
      check(c.name, c.expect, evaluateSupport(caseFacts(c, world), bundle));
    }
  } else {
    for (const c of (cases as ChangeBoundaryCase[] | undefined) ?? (loadGateCases(bundle) as ChangeBoundaryCase[])) {
      check(c.name, c.expect, evaluateChange(changeCaseFacts(c, world), bundle));
    }
  }
  return failures;
}

/**
 * Loads a bundle only if it passes its pack's gate (what a service does at boot). With
 * `forced` (the release was activated with `--force`, which is audited) failing cases are
 * reported through `onForced` instead of refusing.
 * @throws Error listing the failing cases.
 */
export function assertGatePasses<B extends PolicyBundle>(
  bundle: B,
  opts: { forced?: boolean; onForced?: (failures: string[]) => void } = {},
): B {
  const failures = runBoundaryGate(bundle).map(
    (f) => `  ${f.name}: expected ${f.expected.decision} ${f.expected.ruleId}, got ${f.got.decision} ${f.got.ruleId}`,
  );
  if (failures.length && opts.forced) opts.onForced?.(failures);
  else if (failures.length) throw new Error(`policy bundle ${bundle.revision} fails its boundary-case gate:\n${failures.join('\n')}`);
  return bundle;
}

/**
 * The support bundle a service runs with: `policy/<revision>.json` (or `dir`), refused at boot
 * unless it passes its boundary-case gate — a bundle with a units mistake can never become active.
 * @throws Error naming the failing cases, or when the revision is not a support bundle.
 */
export function loadActiveSupportBundle(revision: string, dir?: string, gate: Parameters<typeof assertGatePasses>[1] = {}): SupportBundle {
  const b = assertGatePasses(loadBundle(revision, dir), gate);
  if (b.pack !== 'support') throw new Error(`policy ${revision} is a ${b.pack} bundle, not a support bundle`);
  return b;
}

/**
 * The change bundle a service runs with (default revision `change-c1`), gated like the support one.
 * @throws Error naming the failing cases, or when the revision is not a change bundle.
 */
export function loadActiveChangeBundle(revision: string, dir?: string, gate: Parameters<typeof assertGatePasses>[1] = {}): ChangeBundle {
  const b = assertGatePasses(loadBundle(revision, dir), gate);
  if (b.pack !== 'change') throw new Error(`policy ${revision} is a ${b.pack} bundle, not a change bundle`);
  return b;
}

/**
 * The active bundle of each pack, both through the gate: what every deciding service holds.
 * `gate.forced`: the release was force-activated (audited), so failing cases are only reported.
 * @throws Error when either fails to load or fails its gate (the service does not boot).
 */
export function loadActiveBundles(
  revisions: { support: string; change: string },
  dir?: string,
  gate: Parameters<typeof assertGatePasses>[1] = {},
): PolicyBundles {
  return { support: loadActiveSupportBundle(revisions.support, dir, gate), change: loadActiveChangeBundle(revisions.change, dir, gate) };
}

/** The settings {@link policyRevisions} reads. */
interface RevisionEnv {
  GATEHOUSE_RELEASE: string;
  GATEHOUSE_ENV?: string;
  POLICY_REVISION?: string;
  CHANGE_POLICY_REVISION?: string;
}

/**
 * The policy revisions a service of release `GATEHOUSE_RELEASE` runs: the release manifest's
 * (`releases/<id>.json` `policy`). `POLICY_REVISION` / `CHANGE_POLICY_REVISION` may name another
 * only under `GATEHOUSE_ENV=test`: elsewhere a service would run a bundle its release never named —
 * past the two-person rule for a looser one, unaudited, with `release verify` still matching —
 * so another revision is another release (docs/decisions/0774-a-service-runs-its-release-policy-revisions.md).
 * @throws Error when the release manifest is missing or invalid, or an override names another
 *   revision outside tests.
 */
export function policyRevisions(env: RevisionEnv): { support: string; change: string } {
  const m = loadReleaseManifest(env.GATEHOUSE_RELEASE);
  const revisions = { support: env.POLICY_REVISION ?? m.policy.support, change: env.CHANGE_POLICY_REVISION ?? m.policy.change };
  if (env.GATEHOUSE_ENV === 'test') return revisions;
  const refused = (['support', 'change'] as const)
    .filter((pack) => revisions[pack] !== m.policy[pack])
    .map(
      (pack) =>
        `${pack === 'support' ? 'POLICY_REVISION' : 'CHANGE_POLICY_REVISION'}=${revisions[pack]}: release ${m.id} runs ${m.policy[pack]}`,
    );
  if (refused.length)
    throw new Error(
      `${refused.join('; ')} (releases/${m.id}.json). A service runs its release's policy revisions: ` +
        `put another bundle in a release and activate it (gatehouse release activate <id> --cohort …); the override is for tests only (ADR 0774)`,
    );
  return revisions;
}

/**
 * The bundles a deciding service boots with (agent loop, gateway, approval, executor): its
 * release's policy revisions ({@link policyRevisions}), through the boundary-case gate — except
 * for a release force-activated past its gate (audited, `releases.forced`), which boots with its
 * bundle and logs a `forced_policy` alert.
 * @throws Error naming failing cases when the release was not forced, or when a bundle is missing.
 */
export async function loadServiceBundles(
  db: Db,
  env: RevisionEnv & { POLICY_DIR?: string },
  log: { error: (fields: object, msg: string) => void },
): Promise<PolicyBundles> {
  return loadActiveBundles(policyRevisions(env), env.POLICY_DIR, {
    forced: await releaseForced(db, env.GATEHOUSE_RELEASE),
    onForced: (failures) =>
      log.error({ alert: 'forced_policy', failing: failures.length }, 'running a force-activated bundle that fails its gate'),
  });
}
