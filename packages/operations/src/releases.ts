import {
  ConflictError,
  listReleaseManifests,
  loadReleaseManifest,
  PolicyDenied,
  ReleaseManifestSchema,
  type ReleaseManifest,
} from '@gatehouse/contracts';
import {
  actorHash,
  creditDrainWait,
  inTransaction,
  lockReleases,
  newestMigration,
  recordAudit,
  schemaProblems,
  type Db,
  type Trx,
  type OperationStatus,
} from '@gatehouse/ledger';
import { sql, type RawBuilder } from 'kysely';
import { loadBundle, loadGateCases, runBoundaryGate } from '@gatehouse/policy';
import {
  allTools,
  codeDigests,
  parseProposal,
  releaseDigestProblems,
  strictModeViolations,
  toFunctionTool,
  type Pack,
} from '@gatehouse/tools';
import { within, type BaseEnv, type QueueRegistry } from '@gatehouse/platform';
import { drainRelease, liveRunCount, queuedJobs, resumeReleaseQueues, withQueues } from './queue-ops.ts';
import { requireCanary } from './canary.ts';
import { formatCohort, type CohortLists } from './cohort.ts';
import { raisedLimits, requireSecondPerson, type TwoPersonNeed } from './two-person.ts';

const PACKS: readonly Pack[] = ['support', 'change'];

/**
 * The digests a release manifest must carry for this code (docs/product/releases.md), recomputed from the code.
 * @throws Error when the code knows no migration ({@link newestMigration}).
 */
export function currentDigests(): Pick<ReleaseManifest, 'prompt' | 'toolCatalog' | 'auditSchema' | 'schemaVersion'> {
  return { ...codeDigests(), schemaVersion: newestMigration() };
}

/**
 * Checks a manifest against the code and the database: prompt, tool catalog and audit schema
 * digests equal what the code computes; its schema version is the code's newest migration, and
 * every migration of the code is applied; its policy revisions exist and are bundles of the right pack. Returns the problems
 * (empty: the manifest describes this code).
 */
export async function verifyManifest(db: Db, m: ReleaseManifest): Promise<string[]> {
  const problems = releaseDigestProblems(m);
  for (const pack of PACKS) {
    try {
      const b = loadBundle(m.policy[pack], process.env.POLICY_DIR);
      if (b.pack !== pack) problems.push(`policy.${pack} names a ${b.pack} bundle`);
    } catch (err) {
      problems.push(`policy.${pack}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  problems.push(...(await schemaProblems(db, m.schemaVersion)));
  return problems;
}

/**
 * The safety suite's fast subset for a release: the boundary-case gate of each of its policy
 * bundles, strict-mode validity of every tool schema, and closed parsing of known-bad proposals
 * (an `approved_by` field, glued JSON objects, a cross-tenant field, a canary in a refund reason).
 * Returns the failures.
 */
export function safetySubset(m: ReleaseManifest): { gate: string[]; checks: string[] } {
  const gate: string[] = [];
  for (const pack of PACKS) {
    try {
      for (const f of runBoundaryGate(loadBundle(m.policy[pack], process.env.POLICY_DIR))) {
        gate.push(
          `${m.policy[pack]}: ${f.name}: expected ${f.expected.decision} ${f.expected.ruleId}, got ${f.got.decision} ${f.got.ruleId}`,
        );
      }
    } catch (err) {
      gate.push(`${m.policy[pack]}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  const checks: string[] = [];
  for (const t of allTools) {
    const v = strictModeViolations(toFunctionTool(t).parameters);
    if (v.length) checks.push(`${t.name} is not strict-mode valid: ${v.join('; ')}`);
  }
  const mustFail: Array<[string, string]> = [
    ['issue_refund', '{"orderId":"O-1002","amount":"10.00","reason":"x","approved_by":"lead-eli"}'],
    ['issue_refund', '{"orderId":"O-1"}{"orderId":"O-2"}'],
    ['issue_refund', '{"orderId":"O-1002","amount":"10.001","reason":"x"}'],
    ['issue_refund', '{"orderId":"O-1002","amount":"10.00","reason":"CANARY_SECRET_release_gate"}'],
    ['schedule_change', '{"planId":"plan_0123456789abcdef","window":"manual-window","note":null,"tenant":"northwind"}'],
  ];
  for (const [tool, raw] of mustFail) if (parseProposal(tool, raw).ok) checks.push(`${tool} accepted ${raw}`);
  return { gate, checks };
}

/** Outcome of {@link activateRelease}. */
export interface Activation {
  id: string;
  status: 'active' | 'candidate';
  forced: boolean;
  /** Gate failures bypassed with `--force` (audited), empty otherwise. */
  bypassed: string[];
  /**
   * The release this activation for everyone retired, and how many runs the ledger still holds
   * live on it: each stays on the release it started on (docs/product/releases.md#canary), so
   * that release's services must keep running until they end — or on-call drains and requeues
   * them. Null for a candidate, or when no release was active.
   */
  former: { id: string; liveRuns: number } | null;
}

/** Thrown when a release may not be activated; `problems` lists why. */
export class ActivationRefused extends PolicyDenied {
  readonly problems: string[];
  constructor(id: string, problems: string[]) {
    super('release_gate', `release ${id} refused:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.problems = problems;
  }
}

/**
 * `gatehouse release activate <id> [--cohort tenant:T,user:U] [--force]` (docs/product/releases.md): verifies
 * the manifest's digests against the code and database, runs its policy gates and the safety
 * subset, then records it — with a cohort as a `candidate` serving those tenants/users with
 * consequential writes disabled; without one as the `active` release (the former active one
 * retires). `force` bypasses only failing boundary cases, and the bypass is audited; digest or
 * schema mismatches are never bypassed. Forcing, or a bundle looser than the active one, also
 * needs a second person's approved override (a policy owner or another operator, through the
 * approval service), consumed here once ({@link activationNeeds}).
 * @throws ActivationRefused listing the problems.
 * @throws TwoPersonRequired when a needed override is missing (nothing changes).
 */
export async function activateRelease(
  db: Db,
  id: string,
  opts: { cohort?: { tenants: string[]; users: string[] }; force?: boolean; operator: string; hmacKey: string },
): Promise<Activation> {
  const m = loadReleaseManifest(id);
  if (opts.cohort) await refuseCanaryOpening(db, id);
  else await refuseActivationForAll(db, id);
  const problems = await verifyManifest(db, m);
  const safety = safetySubset(m);
  problems.push(...safety.checks);
  if (safety.gate.length && !opts.force) problems.push(...safety.gate);
  if (problems.length) throw new ActivationRefused(id, problems);
  const status = opts.cohort ? 'candidate' : 'active';
  const needs = await activationNeeds(db, id, { force: opts.force, manifest: m, gate: safety.gate });
  const retired = await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    // Again under the lock: a rollback or an activation may have made it active meanwhile.
    if (opts.cohort) await refuseCanaryOpening(trx, id);
    else await refuseActivationForAll(trx, id);
    // Forcing past the gate, or loosening a limit of the active bundle, takes a second person (ADR 0230).
    if (needs.length) await requireSecondPerson(trx, id, needs, { ...opts, manifest: m });
    // Promoting a candidate to everyone needs its canary analysis to pass (or a two-person override).
    if (status === 'active') await requireCanary(trx, id, opts.operator, opts.hmacKey);
    const former =
      status === 'active'
        ? await trx
            .updateTable('releases')
            .set({ status: 'retired', cohort: null })
            .where('status', '=', 'active')
            .where('id', '!=', id)
            .returning('id')
            .execute()
        : [];
    const cohort = opts.cohort ? JSON.stringify(opts.cohort) : null;
    // An activation ends a drain of this release: its held runs' wait is credited first (ADR 0699).
    await creditDrainWait(trx, id);
    await trx
      .insertInto('releases')
      .values({
        id,
        manifest: JSON.stringify(m),
        status,
        writes_enabled: status === 'active',
        cohort,
        forced: safety.gate.length > 0,
        activated_at: new Date(),
        first_active_at: status === 'active' ? new Date() : null,
      })
      .onConflict((oc) =>
        oc.column('id').doUpdateSet({
          manifest: JSON.stringify(m),
          status,
          cohort,
          draining: false,
          draining_since: null,
          // A candidate always starts (or restarts) with writes disabled; activation for all enables them.
          writes_enabled: status === 'active',
          forced: safety.gate.length > 0,
          activated_at: new Date(),
          first_active_at: firstActiveAt(status),
        }),
      )
      .execute();
    await recordAudit(trx, {
      type: 'release.activated',
      service: 'cli',
      runId: null,
      actorHash: actorHash(opts.hmacKey, opts.operator),
      outcome: `${status}${safety.gate.length ? `:forced_past_${safety.gate.length}_gate_failures` : ''}`,
      revisions: { policy: `${m.policy.support},${m.policy.change}`, toolCatalog: m.toolCatalog.support, release: id },
    });
    return former[0]?.id;
  });
  const former = retired ? { id: retired, liveRuns: await liveRunCount(db, [retired]) } : null;
  return { id, status, forced: safety.gate.length > 0, bypassed: safety.gate, former };
}

/**
 * The `first_active_at` a release gets when it becomes `status` (ADR 0660): kept once set; now when
 * it becomes active for the first time; still unset while it is only a candidate.
 */
function firstActiveAt(status: 'active' | 'candidate'): RawBuilder<Date | null> {
  return status === 'active' ? sql<Date>`coalesce(releases.first_active_at, now())` : sql<Date | null>`releases.first_active_at`;
}

/**
 * A cohort is for a candidate: activating the active release with `--cohort` would turn it into a
 * candidate with consequential writes off, leaving no active release for everyone else (and its
 * restoration needing a canary analysis against nothing).
 * @throws ActivationRefused when `id` is the active release now (nothing changes).
 */
async function refuseCohortOfActive(db: Db, id: string): Promise<void> {
  const r = await db.selectFrom('releases').select('status').where('id', '=', id).executeTakeFirst();
  if (r?.status === 'active')
    throw new ActivationRefused(id, [
      `${id} is the active release: a cohort is for a candidate (gatehouse release activate <candidate> --cohort …); nothing was changed`,
    ]);
}

/**
 * What an activation with a cohort (opening `id`'s canary) is refused for: `id` is the active
 * release ({@link refuseCohortOfActive}), or another release is an open candidate
 * ({@link refuseSecondCanary}). Run before the gate and again under the releases lock.
 * @throws ActivationRefused (nothing changes).
 */
async function refuseCanaryOpening(db: Db, id: string): Promise<void> {
  await refuseCohortOfActive(db, id);
  await refuseSecondCanary(db, id);
}

/**
 * One canary at a time (docs/decisions/0728): opening `id`'s canary while another release is a
 * candidate would leave two canaries, neither of which could be promoted (ADR 0716 refuses a
 * promotion beside another candidate). Re-opening `id` itself (a new cohort for the open
 * candidate) is not a second canary and passes.
 * @throws ActivationRefused naming each open candidate, its cohort and the ways on: its retirement
 *   (`gatehouse release retire`), its promotion, or the rollback that ends every canary (nothing changes).
 */
async function refuseSecondCanary(db: Db, id: string): Promise<void> {
  const { open, active } = await openCanaries(db);
  const others = open.filter((r) => r.id !== id);
  if (!others.length) return;
  throw new ActivationRefused(
    id,
    others.map(
      (c) =>
        `${c.id} is an open candidate for ${cohortText(c.cohort)}: a second canary beside it could never be promoted, nor could it (ADR 0716). ` +
        `End it first: ${retireCommand(c.id, active)}, then open ${id}'s canary; or promote it first: gatehouse release activate ${c.id}; ` +
        `or end every canary: ${endCanaries(active, c.id)}. Nothing was changed`,
    ),
  );
}

/**
 * What an activation for everyone (no cohort: a promotion, or a release put live at once) is
 * refused for: another release is an open candidate ({@link refuseBesideOpenCanary}), or `id` is a
 * candidate whose canary ended before it was promoted ({@link refuseUnpromotedRetired}). Run before
 * the gate and again under the releases lock.
 * @throws ActivationRefused (nothing changes).
 */
async function refuseActivationForAll(db: Db, id: string): Promise<void> {
  await refuseBesideOpenCanary(db, id);
  await refuseUnpromotedRetired(db, id);
}

/**
 * A candidate retired before its promotion (by `release retire` or a rollback; `first_active_at`
 * unset) had a canary that was ended, not passed: activating it for everyone would put it live
 * with no canary analysis at all, since only a candidate's promotion is analysed. It goes live
 * only through a canary again (docs/decisions/0742-a-retired-candidate-goes-live-only-through-a-canary.md).
 * A release never registered here, or once active for everyone, is not this case.
 * @throws ActivationRefused naming the canary to open again (nothing changes).
 */
async function refuseUnpromotedRetired(db: Db, id: string): Promise<void> {
  const r = await db.selectFrom('releases').select(['status', 'first_active_at']).where('id', '=', id).executeTakeFirst();
  if (r?.status === 'retired' && !r.first_active_at) throw new ActivationRefused(id, [`${neverPromoted(id)}; nothing was changed`]);
}

/** Why a candidate retired before its promotion is neither restored nor activated for everyone, and the way to put it live (ADR 0660, 0742). */
function neverPromoted(id: string): string {
  return (
    `release ${id} was never the active release (a candidate retired before it was promoted): its canary was ended, not passed. ` +
    `To put it live, open its canary again: gatehouse release activate ${id} --cohort …, then its promotion (its canary analysis decides)`
  );
}

/** The open candidates (id order, with their cohorts) and the active release's id, as the canary refusals read them. */
async function openCanaries(db: Db): Promise<{ open: { id: string; cohort: unknown }[]; active: string | undefined }> {
  const rows = await db
    .selectFrom('releases')
    .select(['id', 'status', 'cohort'])
    .where('status', 'in', ['candidate', 'active'])
    .orderBy('id')
    .execute();
  return { open: rows.filter((r) => r.status === 'candidate'), active: rows.find((r) => r.status === 'active')?.id };
}

/** The retirement of one candidate, as the refusals spell it (ADR 0728). */
function retireCommand(candidate: string, active: string | undefined): string {
  return `gatehouse release retire ${candidate} --reason "<why>" (its cohort goes back to ${active ?? 'the active release'}, whose writes stay as they are)`;
}

/**
 * Activating a release for everyone while another release is an open candidate (a canary) is
 * refused (docs/decisions/0704): the activation would leave the candidate serving its cohort,
 * silently. That holds for a candidate's promotion too when another candidate is open (ADR 0716):
 * the other would go on serving its cohort beside a new active release its canary was never
 * compared with. Ending a canary is a rollback (writes off, drain, approvals expired, inventory:
 * docs/runbooks/rollback.md), and a rollback ends every open canary; the refusal names it, and
 * the promotion when there is one other candidate.
 * @throws ActivationRefused naming each other open candidate, its cohort and the next steps (nothing changes).
 */
async function refuseBesideOpenCanary(db: Db, id: string): Promise<void> {
  const { open, active } = await openCanaries(db);
  const others = open.filter((r) => r.id !== id);
  if (!others.length) return;
  const self = open.find((r) => r.id === id);
  throw new ActivationRefused(
    id,
    self ? promotionBesideCanary(self, others, active) : others.map((c) => activationBesideCanary(id, c, active)),
  );
}

/** The rollback that ends every open canary, as the refusals spell it. */
function endCanaries(active: string | undefined, retires: string): string {
  return `gatehouse release rollback --to ${active ?? '<former release>'} --reason "<why>" (retires ${retires}; writes off until enable-writes)`;
}

/** ADR 0704: why activating `id` for everyone beside the open candidate `c` is refused, and the two ways on. */
function activationBesideCanary(id: string, c: { id: string; cohort: unknown }, active: string | undefined): string {
  const then = active === undefined || active === id ? '' : `, then activate ${id}`;
  return (
    `${c.id} is a candidate for ${cohortText(c.cohort)}: activating ${id} for everyone would leave it serving that cohort. ` +
    `End the canary first: ${endCanaries(active, 'the candidate')}${then}; or promote it: gatehouse release activate ${c.id}; ` +
    `or retire it alone: ${retireCommand(c.id, active)}${then}. Nothing was changed`
  );
}

/**
 * ADR 0716: why promoting the candidate `self` is refused while `others` are candidates too, and the
 * ways on: retiring each other candidate alone (ADR 0728), after which `self`'s promotion is
 * compared with the release it replaces; or a rollback that ends every canary, then `self`'s
 * canary opened again for its cohort.
 */
function promotionBesideCanary(
  self: { id: string; cohort: unknown },
  others: { id: string; cohort: unknown }[],
  active: string | undefined,
): string[] {
  const all = [self, ...others].map((c) => c.id).join(' and ');
  return [
    ...others.map(
      (c) =>
        `${c.id} is a candidate too, for ${cohortText(c.cohort)}: promoting ${self.id} would leave it serving that cohort, its canary compared with a release no longer active`,
    ),
    ...others.map((c) => `Retire it alone and promote ${self.id} again: ${retireCommand(c.id, active)}`),
    `Or end the canaries: ${endCanaries(active, all)}, then open ${self.id}'s again: gatehouse release activate ${self.id} --cohort ${cohortText(self.cohort)}, and promote it once its analysis passes. Nothing was changed`,
  ];
}

/** A candidate's stored cohort (JSON text or the parsed column) as `--cohort` spells it. */
function cohortText(cohort: unknown): string {
  return formatCohort((typeof cohort === 'string' ? JSON.parse(cohort) : cohort) as CohortLists | null);
}

/** How long {@link activateReleaseWithQueues} waits for Redis to resume the release's queues, ms. */
export const QUEUE_RESUME_TIMEOUT_MS = 10_000;

/** Outcome of {@link activateReleaseWithQueues}: the activation, and why its queues were not resumed (null when they were). */
export interface ActivationWithQueues extends Activation {
  queuesNotResumed: string | null;
}

/**
 * {@link activateRelease}, then resumes the release's queues in Redis (ADR 0480): activation
 * clears a drain's mark in the ledger, and queues left paused in Redis would hold its runs for
 * ever. The activation commits first; the resume waits at most {@link QUEUE_RESUME_TIMEOUT_MS},
 * and its failure is returned (the caller names `gatehouse queues resume --release <id>`), not
 * thrown, since the activation itself stands.
 * @throws ActivationRefused, TwoPersonRequired as {@link activateRelease} (nothing changes).
 */
export async function activateReleaseWithQueues(
  db: Db,
  env: Pick<BaseEnv, 'REDIS_URL' | 'QUEUE_PREFIX'>,
  id: string,
  opts: Parameters<typeof activateRelease>[2],
): Promise<ActivationWithQueues> {
  const a = await activateRelease(db, id, opts);
  const queuesNotResumed = await within(
    withQueues(env, (queues) => resumeReleaseQueues(queues, a.id)),
    QUEUE_RESUME_TIMEOUT_MS,
  ).then(
    () => null,
    (err: unknown) => (err instanceof Error ? err.message : String(err)),
  );
  return { ...a, queuesNotResumed };
}

/** What {@link enableWrites} checked before it enabled a release's consequential writes. */
export interface WritesEnabled {
  id: string;
  /** Boundary cases of the release's bundles that passed, over both packs. */
  boundaryCases: number;
  /** Failing boundary cases tolerated because the release was activated with `--force` (audited then). */
  forcedPast: string[];
  /** How the canary check passed: not a candidate, its analysis passed, or a two-person override was used. */
  canary: 'not_a_candidate' | 'pass' | 'override';
}

/** The manifest of the active release other than `except` (null when there is none). */
async function activeManifest(db: Db, except: string): Promise<ReleaseManifest | null> {
  const row = await db
    .selectFrom('releases')
    .select('manifest')
    .where('status', '=', 'active')
    .where('id', '!=', except)
    .executeTakeFirst();
  return row ? ReleaseManifestSchema.parse(row.manifest) : null;
}

/**
 * What activating `id` needs a second person for (ADR 0230): forcing past failing boundary
 * cases (only when `force`), and limits of its bundles looser than the active release's. A caller
 * that already loaded the manifest and ran its gate passes them (`manifest`, `gate`).
 */
export async function activationNeeds(
  db: Db,
  id: string,
  opts: { force?: boolean; manifest?: ReleaseManifest; gate?: string[] },
): Promise<TwoPersonNeed[]> {
  const m = opts.manifest ?? loadReleaseManifest(id);
  const gate = opts.force ? (opts.gate ?? safetySubset(m).gate) : [];
  const raised = raisedLimits(await activeManifest(db, id), m);
  return [
    ...(gate.length ? [{ kind: 'force_gate' as const, items: gate }] : []),
    ...(raised.length ? [{ kind: 'raise_limits' as const, items: raised }] : []),
  ];
}

/**
 * `gatehouse release enable-writes <id>`: the separate, audited step that lets a release's
 * consequential tools become eligible at the policy boundary — a candidate after its canary, or
 * the release a rollback restored (docs/runbooks/rollback.md). It runs the release's safety
 * cases first (its bundles' boundary-case gate and the closed-parsing and strict-schema checks,
 * {@link safetySubset}) against the manifest on disk and refuses when any fails; failing boundary
 * cases are tolerated only for a release that was activated with `--force` (that bypass was
 * audited when it happened). A candidate's canary analysis must pass too, or a second person's
 * approved override is consumed ({@link requireCanary}).
 * @throws ActivationRefused listing the failing safety cases.
 * @throws CanaryRefused when a candidate's analysis fails and no approved override applies.
 * @throws Error when the release is not registered or is retired.
 */
export async function enableWrites(db: Db, id: string, operator: string, hmacKey: string): Promise<WritesEnabled> {
  return inTransaction(db, async (trx) => {
    await lockReleases(trx);
    const r = await trx.selectFrom('releases').select(['status', 'forced']).where('id', '=', id).executeTakeFirst();
    if (!r || r.status === 'retired') throw new Error(`release ${id} is ${r ? 'retired' : 'not registered'}`);
    const m = loadReleaseManifest(id);
    const safety = safetySubset(m);
    const refused = [...safety.checks, ...(r.forced ? [] : safety.gate)];
    if (refused.length) throw new ActivationRefused(id, refused);
    const canary = await requireCanary(trx, id, operator, hmacKey);
    await trx.updateTable('releases').set({ writes_enabled: true }).where('id', '=', id).execute();
    await recordAudit(trx, {
      type: 'release.writes_enabled',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      outcome: `enabled;safety:passed;canary:${canary}${r.forced ? `;forced_past_${safety.gate.length}_gate_failures` : ''}`,
      revisions: { policy: `${m.policy.support},${m.policy.change}`, release: id },
    });
    return { id, boundaryCases: boundaryCaseCount(m) - safety.gate.length, forcedPast: r.forced ? safety.gate : [], canary };
  });
}

/** How many boundary cases the bundles of `m` are gated on (both packs; a revision's own table, e.g. support-p2's R10 cases, included: what `runBoundaryGate` runs). */
function boundaryCaseCount(m: ReleaseManifest): number {
  return PACKS.reduce((n, pack) => n + loadGateCases(loadBundle(m.policy[pack], process.env.POLICY_DIR)).length, 0);
}

/** What {@link rollbackRelease} did and what is left for an explicit choice. */
export interface RollbackReport {
  to: string;
  rolledBack: string[];
  /** Approvals of rolled-back releases that were expired (they can never be consumed). */
  expiredApprovals: number;
  /** Operations of the rolled-back releases by status; running and failed_unknown go to reconciliation. */
  operations: Partial<Record<OperationStatus, number>>;
  /** Jobs still queued on the rolled-back releases: each needs `queues requeue` or `queues quarantine`. */
  queuedJobs: number;
  /** Runs still live on the rolled-back releases, from the ledger (a run waiting on its approval has no job queued): the same choice. */
  liveRuns: number;
  /** The restored release's failing safety cases (empty: they pass and writes may be enabled by command). */
  safety: string[];
}

/** What an operator passes to {@link rollbackRelease}. */
export interface RollbackOptions {
  /** The former release to restore (its manifest must be in `releases/`). */
  to: string;
  /** Why on-call rolls back: 1–500 printable characters, recorded in the audit chain. */
  reason: string;
  operator: string;
  hmacKey: string;
  /** Called with each step's line as it completes (the CLI prints them). */
  onStep?: (line: string) => void;
}

/** Longest rollback reason kept (characters); the audit event carries it whole. */
export const ROLLBACK_REASON_MAX = 500;

/**
 * Checks a rollback's (or a retirement's: `command`, named in the message) reason: present, at most
 * {@link ROLLBACK_REASON_MAX} characters, no control characters (it is written to the audit chain and printed).
 * @throws Error saying what is wrong.
 */
export function checkRollbackReason(reason: string | undefined, command = 'release rollback'): string {
  const r = (reason ?? '').trim();
  if (!r) throw new Error(`${command} needs --reason "<why>" (recorded in the audit chain)`);
  if (r.length > ROLLBACK_REASON_MAX) throw new Error(`--reason is ${r.length} characters; at most ${ROLLBACK_REASON_MAX}`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(r)) throw new Error('--reason may not contain control characters');
  return r;
}

/**
 * Thrown by {@link rollbackRelease} before anything changes when there is nothing to roll back
 * from: `to` is already the only active release and no candidate is open (409; CLI exit 1).
 */
export class RollbackRefused extends ConflictError {
  /**
   * @param to the release named by `--to`.
   * @param why `nothing_to_roll_back` (default: `to` is the only active release), `not_a_former_release`
   *   (`to` is the open candidate, never ran on this ledger, or was never active for everyone: ADR 0660).
   * @param message what to tell the operator (default: the `nothing_to_roll_back` sentence).
   */
  constructor(to: string, why: 'nothing_to_roll_back' | 'not_a_former_release' = 'nothing_to_roll_back', message?: string) {
    super(
      why,
      message ??
        `release ${to} is already the active release and no candidate is open: nothing to roll back from; nothing was changed (writes stay as they are)`,
    );
  }
}

/**
 * A rollback restores a former release: the active one, or a retired one that was once active for
 * everyone (`first_active_at` set) — never the open candidate, nor a candidate a rollback retired
 * before it was promoted: restoring either would promote it to everyone past its canary analysis
 * and the two-person rule of a looser bundle, as would a release the ledger never ran
 * (docs/decisions/0660-a-rollback-restores-a-release-that-ran.md).
 * @throws RollbackRefused (`not_a_former_release`) naming what to run instead.
 */
async function assertFormerRelease(db: Db | Trx, to: string): Promise<void> {
  const r = await db.selectFrom('releases').select(['status', 'first_active_at']).where('id', '=', to).executeTakeFirst();
  if (!r)
    throw new RollbackRefused(
      to,
      'not_a_former_release',
      `release ${to} never ran on this ledger: a rollback restores a former release; to put a new one live, gatehouse release activate ${to} --cohort …; nothing was changed`,
    );
  if (r.status === 'candidate')
    throw new RollbackRefused(
      to,
      'not_a_former_release',
      `release ${to} is a candidate, not a former release: promote it with gatehouse release activate ${to} (its canary analysis decides), or roll back to the release before it; nothing was changed`,
    );
  if (r.status === 'retired' && !r.first_active_at)
    throw new RollbackRefused(
      to,
      'not_a_former_release',
      `${neverPromoted(to)}; it is not a former release, so a rollback does not restore it; nothing was changed`,
    );
}

/**
 * `gatehouse release rollback --to <former> --reason <why>` (docs/runbooks/rollback.md,
 * docs/product/releases.md). For every other active or candidate release, in this order:
 * disable write eligibility at the policy boundary, drain its queues (no new claims; in-flight
 * work finishes or its lease expires), expire its pending and unconsumed approvals, inventory
 * its operations by status (running and failed_unknown are left for reconciliation, never
 * turned into retryable failures). Then the former release is restored as active for everyone
 * with consequential writes OFF, and its safety cases run against it; writes come back only by
 * `gatehouse release enable-writes <former>`, which runs them again. Queued candidate jobs are
 * counted, never moved: on-call requeues or quarantines them explicitly. Each step is reported
 * through `onStep` as it completes; the reason is audited.
 * @throws Error when the reason is missing or malformed, or the former release has no manifest.
 * @throws RollbackRefused when `to` is already the only active release, is the open candidate,
 *   never ran on this ledger, or was never the active release (nothing is changed).
 */
export async function rollbackRelease(db: Db, queues: QueueRegistry, opts: RollbackOptions): Promise<RollbackReport> {
  const reason = checkRollbackReason(opts.reason);
  const former = loadReleaseManifest(opts.to);
  const step = opts.onStep ?? (() => undefined);
  await assertFormerRelease(db, opts.to);
  const others = (
    await db.selectFrom('releases').select('id').where('status', 'in', ['active', 'candidate']).where('id', '!=', opts.to).execute()
  ).map((r) => r.id);
  if (!others.length) throw new RollbackRefused(opts.to);
  const list = others.join(', ');
  await db.updateTable('releases').set({ writes_enabled: false }).where('id', 'in', others).execute();
  step(`1/6 consequential writes off at the policy boundary for: ${list}`);
  for (const id of others) await drainRelease(db, queues, id, opts);
  step(`2/6 queues drained (paused; in-flight work finishes or its lease expires): ${list}`);
  const report = await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    await assertFormerRelease(trx, opts.to); // again under the lock: it may have become a candidate meanwhile
    const retired = await retireReleases(trx, others);
    step(`3/6 approvals of ${list} expired: ${retired.expiredApprovals}`);
    step(`4/6 operations of ${list} by status: ${JSON.stringify(retired.operations)} (running, failed_unknown → gatehouse reconcile)`);
    await restoreRelease(trx, opts.to, former);
    await recordAudit(trx, {
      type: 'release.rolled_back',
      service: 'cli',
      runId: null,
      actorHash: actorHash(opts.hmacKey, opts.operator),
      outcome: `from:${others.join(',')};expired_approvals:${retired.expiredApprovals};writes:off;reason:${reason}`,
      revisions: { release: opts.to },
    });
    return retired;
  });
  await resumeReleaseQueues(queues, opts.to);
  step(`5/6 ${opts.to} restored as the active release (its queues resumed), consequential writes OFF`);
  let queued = 0;
  for (const id of others) queued += (await queuedJobs(queues, id)).length;
  const liveRuns = await liveRunCount(db, others);
  const safety = safetySubset(former);
  const failing = [...safety.gate, ...safety.checks];
  step(
    failing.length
      ? `6/6 safety cases of ${opts.to}: ${failing.length} FAIL — writes stay off`
      : `6/6 safety cases of ${opts.to}: pass (${boundaryCaseCount(former)} boundary cases, closed parsing, strict schemas)`,
  );
  return { to: opts.to, rolledBack: others, ...report, queuedJobs: queued, liveRuns, safety: failing };
}

/**
 * Expires the pending and unconsumed approvals of `ids`, inventories their operations by status and
 * retires them (status `retired`, no cohort). Runs inside the caller's transaction, which holds the
 * releases lock: a rollback's, or a candidate's retirement (ADR 0728).
 */
export async function retireReleases(
  trx: Db,
  ids: string[],
): Promise<{ expiredApprovals: number; operations: RollbackReport['operations'] }> {
  const operations: RollbackReport['operations'] = {};
  if (!ids.length) return { expiredApprovals: 0, operations };
  const expired = await trx
    .updateTable('approvals')
    .set({ expires_at: new Date() })
    .where('release_id', 'in', ids)
    .where('status', 'in', ['pending', 'approved'])
    .returning('id')
    .execute();
  const ops = await trx
    .selectFrom('operations')
    .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
    .where('release_id', 'in', ids)
    .groupBy('status')
    .execute();
  for (const o of ops) operations[o.status] = Number(o.n);
  await trx.updateTable('releases').set({ status: 'retired', cohort: null }).where('id', 'in', ids).execute();
  return { expiredApprovals: expired.length, operations };
}

/** Makes `id` the one active release, for everyone, with consequential writes off (inside a rollback). */
async function restoreRelease(trx: Trx, id: string, manifest: ReleaseManifest): Promise<void> {
  await trx.updateTable('releases').set({ status: 'retired', cohort: null }).where('status', '=', 'active').where('id', '!=', id).execute();
  // Restoring ends a drain of `id` (an earlier rollback away from it): its held runs' wait is credited first (ADR 0699).
  await creditDrainWait(trx, id);
  const restored = {
    status: 'active' as const,
    writes_enabled: false,
    cohort: null,
    draining: false,
    draining_since: null,
    activated_at: new Date(),
  };
  await trx
    .insertInto('releases')
    .values({ id, manifest: JSON.stringify(manifest), ...restored, first_active_at: new Date() })
    .onConflict((oc) => oc.column('id').doUpdateSet({ ...restored, first_active_at: firstActiveAt('active') }))
    .execute();
}

/** Every release manifest in `releases/`, for `gatehouse release list`. */
export function releaseManifests(): ReleaseManifest[] {
  return listReleaseManifests();
}
