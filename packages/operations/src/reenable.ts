import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { Refused } from '@gatehouse/contracts';
import {
  actorHash,
  effectsAfterSwitchOff,
  effectsWithRevokedEpoch,
  inTransaction,
  lockContainment,
  openReenableStages,
  recordAudit,
  type Db,
  type OpenReenableStage,
  type OutboxRow,
  type ReenableStage,
  type Trx,
} from '@gatehouse/ledger';
import { findTool, toolsOfPack } from '@gatehouse/tools';
import { releaseHeld, requireKnownTool, UnknownTool, writeSwitch } from './ops.ts';
import { cohortEntries, formatCohort } from './cohort.ts';
import { consumeOverride, overrideDigest, requestOverride } from './overrides.ts';

/** The confidence of the bound: 95 % (the "rule of three", docs/decisions/0310-staged-reenable.md). */
const MISS = 0.05;

/** The `--max-bound` when none is given: a 5 % failure rate, which needs 59 clean executions. */
export const DEFAULT_MAX_BOUND = 0.05;

/**
 * The 95 % upper bound on the failure rate after `n` clean executions and none failed:
 * 1 − 0.05^(1/n) (≈ 3/n, the "rule of three"); 1 when n = 0 (nothing is known).
 * @throws RangeError for a negative or fractional n.
 */
export function failureBound(n: number): number {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`n must be a whole number ≥ 0, got ${n}`);
  return n === 0 ? 1 : 1 - MISS ** (1 / n);
}

/**
 * The fewest clean executions whose bound ({@link failureBound}) is at most `maxBound` (0 < maxBound ≤ 1).
 * @throws RangeError for a bound outside (0, 1].
 */
export function cleanNeeded(maxBound: number): number {
  if (!(maxBound > 0 && maxBound <= 1)) throw new RangeError(`--max-bound must be in (0, 1], got ${maxBound}`);
  if (maxBound === 1) return 0;
  let n = Math.max(1, Math.floor(Math.log(MISS) / Math.log(1 - maxBound)));
  while (failureBound(n) > maxBound) n += 1;
  return n;
}

/** The stage after `stage` (null: none open yet, the first is `read_only`). */
export function nextStage(stage: ReenableStage | null): ReenableStage {
  if (stage === null) return 'read_only';
  if (stage === 'read_only') return 'cohort';
  return 'everyone';
}

/** A stage's evidence: clean executions, executions that were not clean, the bound, what was counted. */
export interface StageEvidence {
  /** Operations that succeeded in the stage with no difference or containment alert against them. */
  n: number;
  /** Operations of the stage that failed the definition: outcome unknown, a reconciliation item, a containment alert. */
  failures: number;
  /** {@link failureBound}(n); 1 when any execution was not clean (the rule-of-three needs none). */
  bound: number;
  /** The tools whose operations count: the pack's reads at `read_only`, the tool itself after. */
  tools: string[];
}

/** The tools whose executions are a stage's evidence (read_only: the pack's non-consequential tools). */
function evidenceTools(tool: string, stage: ReenableStage): string[] {
  const def = findTool(tool);
  if (!def) throw new UnknownTool(tool);
  if (stage !== 'read_only') return [tool];
  return toolsOfPack(def.pack)
    .filter((t) => !t.consequential && t.name !== tool)
    .map((t) => t.name);
}

/**
 * The evidence of an open stage (docs/decisions/0310-staged-reenable.md#clean): the operations of
 * {@link evidenceTools} claimed since the stage started; clean = `succeeded`, no reconciliation
 * item names it, and neither containment monitor (`effect_after_switch_off`,
 * `effect_after_epoch_bump`) names it now; not clean = `failed_unknown`, or named by either.
 * `failed` (a definite refusal, no effect) and unfinished operations are neither.
 */
export async function stageEvidence(db: Db | Trx, stage: OpenReenableStage): Promise<StageEvidence> {
  const tools = evidenceTools(stage.tool, stage.stage);
  if (!tools.length) return { n: 0, failures: 0, bound: 1, tools };
  const alerted = [...(await effectsAfterSwitchOff(db as Db)), ...(await effectsWithRevokedEpoch(db as Db))].map((r) => r.id);
  const rows = await db
    .selectFrom('operations as o')
    .select(['o.key', 'o.status'])
    .select(sql<boolean>`exists (select 1 from reconciliation_items r where r.operation_key = o.key)`.as('differs'))
    .where('o.tool', 'in', tools)
    .where('o.created_at', '>=', stage.startedAt)
    .where('o.status', 'in', ['succeeded', 'failed_unknown'])
    .execute();
  const dirty = rows.filter((r) => r.status === 'failed_unknown' || r.differs || alerted.includes(r.key));
  const n = rows.length - dirty.length;
  return { n, failures: dirty.length, bound: dirty.length ? 1 : failureBound(n), tools };
}

/** A contained tool as `gatehouse reenable status` shows it. */
export interface ReenableStatus {
  tool: string;
  /** `off`: switched off, no staged re-enable started yet. */
  stage: ReenableStage | 'off';
  cohort: { tenants: string[]; users: string[] } | null;
  since: Date;
  by: string;
  reason: string | null;
  evidence: StageEvidence | null;
  next: ReenableStage;
  /** What starting the next stage needs, in words. */
  needs: string;
}

/** What advancing from `stage` to `next` needs with `maxBound`, in words. */
function needsText(stage: ReenableStage | 'off', next: ReenableStage, maxBound: number): string {
  if (stage === 'off') return `nothing: "reenable advance <tool> --reason" starts read_only (the tool stays held)`;
  const cohort = next === 'cohort' ? ' and --cohort tenant:T,user:U' : '';
  return `${cleanNeeded(maxBound)} clean execution(s) and none failed (bound ≤ ${maxBound})${cohort}, or a second operator's override`;
}

/**
 * Every contained tool — switched off, or with an open staged re-enable — or `tool` alone: its
 * stage, cohort, since when and by whom, the stage's evidence and what the next stage needs.
 */
export async function reenableStatus(db: Db, tool?: string, maxBound = DEFAULT_MAX_BOUND): Promise<ReenableStatus[]> {
  const open = await openReenableStages(db, tool);
  let q = db.selectFrom('tool_switches').selectAll().where('enabled', '=', false);
  if (tool) q = q.where('tool', '=', tool);
  const off = (await q.execute()).filter((s) => !open.some((o) => o.tool === s.tool));
  const out: ReenableStatus[] = off.map((s) => ({
    tool: s.tool,
    stage: 'off',
    cohort: null,
    since: new Date(s.changed_at),
    by: s.changed_by,
    reason: null,
    evidence: null,
    next: 'read_only',
    needs: needsText('off', 'read_only', maxBound),
  }));
  for (const o of open) {
    const next = nextStage(o.stage);
    out.push({
      tool: o.tool,
      stage: o.stage,
      cohort: o.stage === 'cohort' ? { tenants: o.cohortTenants, users: o.cohortUsers } : null,
      since: o.startedAt,
      by: o.startedBy,
      reason: o.reason,
      evidence: await stageEvidence(db, o),
      next,
      needs: needsText(o.stage, next, maxBound),
    });
  }
  return out.sort((a, b) => a.tool.localeCompare(b.tool));
}

/** `reenable advance` refused: not contained, a missing cohort, or not enough evidence; nothing changed. */
export class ReenableRefused extends Refused {
  declare readonly reason: 'not_contained' | 'cohort_needed' | 'cohort_not_now' | 'evidence';
  constructor(reason: ReenableRefused['reason'], message: string) {
    super(reason, message);
  }
}

/** What `reenable advance` asks for. */
export interface AdvanceRequest {
  tool: string;
  cohort?: { tenants: string[]; users: string[] };
  maxBound: number;
  reason: string;
  operator: string;
  hmacKey: string;
}

/** What `reenable advance` did: the stage entered, the evidence it rested on, the override used, rows to publish. */
export interface AdvanceResult {
  stage: ReenableStage;
  evidence: StageEvidence | null;
  overrideId: string | null;
  rows: OutboxRow[];
}

/** The items a `reenable` override is bound to: the open stage, the stage asked for, the cohort and the evidence. */
function overrideItems(open: OpenReenableStage, cohort: AdvanceRequest['cohort'], e: StageEvidence): string[] {
  const c = cohort ? [`cohort:${cohortEntries(cohort).sort().join(',')}`] : [];
  return [`stage:${open.id}`, `to:${nextStage(open.stage)}`, `n:${e.n}`, `failures:${e.failures}`, ...c];
}

/**
 * Checks the request against the open stage (or its absence).
 * @throws ReenableRefused when the tool is not contained, or the cohort is missing, empty or not wanted.
 */
async function checkAdvance(trx: Trx, r: AdvanceRequest, open: OpenReenableStage | undefined): Promise<ReenableStage> {
  const next = nextStage(open?.stage ?? null);
  if (!open) {
    const sw = await trx.selectFrom('tool_switches').select('enabled').where('tool', '=', r.tool).forUpdate().executeTakeFirst();
    if (!sw || sw.enabled)
      throw new ReenableRefused(
        'not_contained',
        `${r.tool} is not switched off: there is nothing to re-enable (gatehouse switch off ${r.tool} contains it)`,
      );
  }
  if (next === 'cohort' && !r.cohort)
    throw new ReenableRefused('cohort_needed', `${r.tool}: the cohort stage needs --cohort tenant:T,user:U (who may execute it first)`);
  // A cohort of no one: refused with its reason for every caller, not only by the CLI's parser
  // (the stage row's CHECK would fail it later as a raw constraint violation).
  if (r.cohort && !r.cohort.tenants.length && !r.cohort.users.length)
    throw new ReenableRefused('cohort_needed', `${r.tool}: the cohort names no tenant or user (--cohort tenant:T,user:U)`);
  if (next !== 'cohort' && r.cohort)
    throw new ReenableRefused('cohort_not_now', `${r.tool}: the next stage is ${next}, which takes no --cohort`);
  return next;
}

/**
 * Judges the open stage's evidence against `maxBound`; short of it, consumes a second operator's
 * approved `reenable` override bound to exactly this stage, cohort and evidence.
 * @returns the evidence and the override used (null: the evidence sufficed).
 * @throws ReenableRefused (`evidence`) with n, the bound, what is needed and how to ask for an override.
 */
async function judgeEvidence(
  trx: Trx,
  r: AdvanceRequest,
  open: OpenReenableStage,
): Promise<{ e: StageEvidence; overrideId: string | null }> {
  const e = await stageEvidence(trx, open);
  if (!e.failures && e.bound <= r.maxBound) return { e, overrideId: null };
  const items = overrideItems(open, r.cohort, e);
  const overrideId = await consumeOverride(trx, {
    release: r.tool,
    kind: 'reenable',
    digest: overrideDigest('reenable', r.tool, items, null),
    summary: items.join(';'),
    operator: r.operator,
    hmacKey: r.hmacKey,
  });
  if (overrideId) return { e, overrideId };
  const why = e.failures
    ? `${e.failures} execution(s) of the ${open.stage} stage were not clean (outcome unknown, a reconciliation difference or a containment alert) — investigate with gatehouse reconcile`
    : `the ${open.stage} stage has ${e.n} clean execution(s), bound ${e.bound.toFixed(4)} > --max-bound ${r.maxBound}: it needs ${cleanNeeded(r.maxBound)}`;
  throw new ReenableRefused(
    'evidence',
    `${r.tool} cannot advance to ${nextStage(open.stage)}: ${why}. Or ask a second operator: gatehouse reenable override ${r.tool}${r.cohort ? ' --cohort …' : ''} --reason "<why>"`,
  );
}

/**
 * `gatehouse reenable advance <tool>` (docs/decisions/0310-staged-reenable.md): in one transaction,
 * under the tool's switch row lock — ends the open stage and starts the next (`read_only` when none
 * is open: the tool stays held; `cohort`: the cohort's held steps are released; `everyone`: the
 * switch goes on, every held step is released, and the re-enable is closed), audited
 * `reenable.advanced`. From an open stage it needs that stage's evidence within `maxBound`, or an override.
 * @throws ReenableRefused when refused; nothing changes.
 */
export async function advanceReenable(db: Db, r: AdvanceRequest): Promise<AdvanceResult> {
  const reason = r.reason.trim();
  if (!reason || reason.length > 500) throw new Error('reenable advance needs --reason "<why>" (1–500 characters)');
  requireKnownTool(r.tool);
  return inTransaction(db, async (trx) => {
    // Before the switch row, as every change of the tool's containment takes it first (ADR 0683).
    await lockContainment(trx, r.tool, 'exclusive');
    await trx.selectFrom('tool_switches').select('tool').where('tool', '=', r.tool).forUpdate().execute();
    const [open] = await openReenableStages(trx, r.tool);
    const next = await checkAdvance(trx, r, open);
    const judged = open ? await judgeEvidence(trx, r, open) : { e: null, overrideId: null };
    if (open) await trx.updateTable('tool_reenable_stages').set({ ended_at: new Date() }).where('id', '=', open.id).execute();
    await insertStage(trx, { ...r, reason }, next, judged.e, judged.overrideId);
    if (next === 'everyone') await writeSwitch(trx, r.tool, true, r.operator, r.hmacKey, 'on;reenable:everyone');
    const rows = next === 'read_only' ? [] : await releaseHeld(trx, r.tool);
    return { stage: next, evidence: judged.e, overrideId: judged.overrideId, rows };
  });
}

/** Inserts the stage row (closed at once for `everyone`) and its `reenable.advanced` audit event. */
async function insertStage(
  trx: Trx,
  r: AdvanceRequest,
  stage: ReenableStage,
  e: StageEvidence | null,
  overrideId: string | null,
): Promise<void> {
  const now = new Date();
  await trx
    .insertInto('tool_reenable_stages')
    .values({
      id: randomUUID(),
      tool: r.tool,
      stage,
      cohort_tenants: r.cohort?.tenants ?? [],
      cohort_users: r.cohort?.users ?? [],
      started_at: now,
      started_by: r.operator,
      reason: r.reason,
      evidence_n: e?.n ?? null,
      evidence_failures: e?.failures ?? null,
      evidence_bound: e?.bound ?? null,
      max_bound: e ? r.maxBound : null,
      override_id: overrideId,
      ended_at: stage === 'everyone' ? now : null,
    })
    .execute();
  const cohort = r.cohort ? `;cohort:${formatCohort(r.cohort)}` : '';
  const ev = e ? `;n:${e.n};failures:${e.failures};bound:${e.bound.toFixed(4)};max:${r.maxBound}` : '';
  await recordAudit(trx, {
    type: 'reenable.advanced',
    service: 'cli',
    runId: null,
    actorHash: actorHash(r.hmacKey, r.operator),
    tool: r.tool,
    outcome: `${stage}${ev}${overrideId ? `;override:${overrideId}` : ''}${cohort};reason:${r.reason}`,
  });
}

/**
 * `gatehouse reenable override <tool> [--cohort …] --reason <why>`: asks a second operator to let the
 * open stage advance with the evidence it has now — bound to the stage, the next stage, the cohort
 * and n / failures (if they change, ask again). Another operator or a policy owner approves it
 * through the approval service (inbox or API), like a release override (docs/decisions/0230-two-person-release-changes.md).
 * @returns the override's approval id and the evidence it is bound to.
 * @throws ReenableRefused (`not_contained`) when no stage is open.
 */
export async function requestReenableOverride(
  db: Db,
  r: Omit<AdvanceRequest, 'maxBound'>,
): Promise<{ id: string; evidence: StageEvidence; items: string[] }> {
  const [open] = await openReenableStages(db, r.tool);
  if (!open)
    throw new ReenableRefused(
      'not_contained',
      `${r.tool} has no open staged re-enable: start it with gatehouse reenable advance ${r.tool} --reason "<why>"`,
    );
  const evidence = await stageEvidence(db, open);
  const items = overrideItems(open, r.cohort, evidence);
  const ticket = await requestOverride(db, {
    release: r.tool,
    kind: 'reenable',
    items,
    manifest: null,
    digest: overrideDigest('reenable', r.tool, items, null),
    summary: items.join(';'),
    reason: r.reason,
    operator: r.operator,
    hmacKey: r.hmacKey,
  });
  return { id: ticket.approvalId, evidence, items };
}
