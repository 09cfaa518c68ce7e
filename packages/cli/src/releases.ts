import { z } from 'zod';
import {
  AuditEventSchema,
  canonicalJson,
  listReleaseManifests,
  loadReleaseManifest,
  sha256Hex,
  type ReleaseManifest,
} from '@gatehouse/contracts';
import {
  actorHash,
  appliedMigrations,
  inTransaction,
  knownMigrations,
  lockReleases,
  recordAudit,
  type Db,
  type OperationStatus,
} from '@gatehouse/ledger';
import { loadBundle, runBoundaryGate } from '@gatehouse/policy';
import {
  allTools,
  catalogDigest,
  instructionsFor,
  parseProposal,
  strictModeViolations,
  toFunctionTool,
  toolsOfPack,
  type Pack,
} from '@gatehouse/tools';
import type { QueueRegistry } from '@gatehouse/platform';
import { drainRelease, queuedJobs } from './queue-ops.ts';

const PACKS: readonly Pack[] = ['support', 'change'];

/** The digests a release manifest must carry for this code (docs/product/releases.md), recomputed from the code. */
export function currentDigests(): Pick<ReleaseManifest, 'prompt' | 'toolCatalog' | 'auditSchema' | 'schemaVersion'> {
  return {
    prompt: { support: instructionsFor('support').hash, change: instructionsFor('change').hash },
    toolCatalog: { support: catalogDigest(toolsOfPack('support')), change: catalogDigest(toolsOfPack('change')) },
    auditSchema: sha256Hex(canonicalJson(z.toJSONSchema(AuditEventSchema))),
    schemaVersion: knownMigrations().at(-1) ?? '',
  };
}

/**
 * Checks a manifest against the code and the database: prompt, tool catalog and audit schema
 * digests equal what the code computes; its schema version is a known migration already
 * applied; its policy revisions exist and are bundles of the right pack. Returns the problems
 * (empty: the manifest describes this code).
 */
export async function verifyManifest(db: Db, m: ReleaseManifest): Promise<string[]> {
  const now = currentDigests();
  const problems: string[] = [];
  for (const pack of PACKS) {
    if (m.prompt[pack] !== now.prompt[pack]) problems.push(`prompt.${pack} digest differs from the code (${now.prompt[pack]})`);
    if (m.toolCatalog[pack] !== now.toolCatalog[pack]) {
      problems.push(`toolCatalog.${pack} digest differs from the code (${now.toolCatalog[pack]})`);
    }
    try {
      const b = loadBundle(m.policy[pack], process.env.POLICY_DIR);
      if (b.pack !== pack) problems.push(`policy.${pack} names a ${b.pack} bundle`);
    } catch (err) {
      problems.push(`policy.${pack}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  if (m.auditSchema !== now.auditSchema) problems.push(`auditSchema digest differs from the code (${now.auditSchema})`);
  if (!knownMigrations().includes(m.schemaVersion)) problems.push(`schemaVersion ${m.schemaVersion} is not a migration of this code`);
  else if (!(await appliedMigrations(db)).includes(m.schemaVersion)) problems.push(`schemaVersion ${m.schemaVersion} is not applied`);
  return problems;
}

/**
 * The safety suite's fast subset for a release: the boundary-case gate of each of its policy
 * bundles, strict-mode validity of every tool schema, and closed parsing of known-bad proposals
 * (an `approved_by` field, glued JSON objects, a cross-tenant field). Returns the failures.
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
}

/** Thrown when a release may not be activated; `problems` lists why. */
export class ActivationRefused extends Error {
  override name = 'ActivationRefused';
  readonly problems: string[];
  constructor(id: string, problems: string[]) {
    super(`release ${id} refused:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.problems = problems;
  }
}

/**
 * `gatehouse release activate <id> [--cohort tenant:T,user:U] [--force]` (docs/product/releases.md): verifies
 * the manifest's digests against the code and database, runs its policy gates and the safety
 * subset, then records it — with a cohort as a `candidate` serving those tenants/users with
 * consequential writes disabled; without one as the `active` release (the former active one
 * retires). `force` bypasses only failing boundary cases, and the bypass is audited; digest or
 * schema mismatches are never bypassed.
 * @throws ActivationRefused listing the problems.
 */
export async function activateRelease(
  db: Db,
  id: string,
  opts: { cohort?: { tenants: string[]; users: string[] }; force?: boolean; operator: string; hmacKey: string },
): Promise<Activation> {
  const m = loadReleaseManifest(id);
  const problems = await verifyManifest(db, m);
  const safety = safetySubset(m);
  problems.push(...safety.checks);
  if (safety.gate.length && !opts.force) problems.push(...safety.gate);
  if (problems.length) throw new ActivationRefused(id, problems);
  const status = opts.cohort ? 'candidate' : 'active';
  await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    if (status === 'active') {
      await trx
        .updateTable('releases')
        .set({ status: 'retired', cohort: null })
        .where('status', '=', 'active')
        .where('id', '!=', id)
        .execute();
    }
    const cohort = opts.cohort ? JSON.stringify(opts.cohort) : null;
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
      })
      .onConflict((oc) =>
        oc.column('id').doUpdateSet({
          manifest: JSON.stringify(m),
          status,
          cohort,
          draining: false,
          // A candidate always starts (or restarts) with writes disabled; activation for all enables them.
          writes_enabled: status === 'active',
          forced: safety.gate.length > 0,
          activated_at: new Date(),
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
  });
  return { id, status, forced: safety.gate.length > 0, bypassed: safety.gate };
}

/**
 * `gatehouse release enable-writes <id>`: the separate, audited step that lets a candidate's
 * consequential tools become eligible at the policy boundary.
 * @throws Error when the release is not registered or is retired.
 */
export async function enableWrites(db: Db, id: string, operator: string, hmacKey: string): Promise<void> {
  await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    const r = await trx.selectFrom('releases').select('status').where('id', '=', id).executeTakeFirst();
    if (!r || r.status === 'retired') throw new Error(`release ${id} is ${r ? 'retired' : 'not registered'}`);
    await trx.updateTable('releases').set({ writes_enabled: true }).where('id', '=', id).execute();
    await recordAudit(trx, {
      type: 'release.writes_enabled',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      outcome: 'enabled',
      revisions: { release: id },
    });
  });
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
  /** The former bundle's safety subset after restoration (empty: passes). */
  safety: string[];
}

/**
 * `gatehouse release rollback --to <former>` (docs/product/releases.md): for every other active or candidate
 * release, in this order — disable write eligibility at the policy boundary, drain its queues
 * (no new claims; in-flight work finishes or its lease expires), expire its pending and
 * unconsumed approvals, inventory its operations by status (running and failed_unknown are left
 * for reconciliation, never turned into retryable failures) — then restore the former release
 * as active for everyone and run its safety subset. Queued candidate jobs are counted, never
 * moved: on-call requeues or quarantines them explicitly. Audited.
 * @throws Error when the former release has no manifest.
 */
export async function rollbackRelease(
  db: Db,
  queues: QueueRegistry,
  opts: { to: string; operator: string; hmacKey: string },
): Promise<RollbackReport> {
  const former = loadReleaseManifest(opts.to);
  const others = (
    await db.selectFrom('releases').select('id').where('status', 'in', ['active', 'candidate']).where('id', '!=', opts.to).execute()
  ).map((r) => r.id);
  // 1. Writes off at the policy boundary first.
  if (others.length) await db.updateTable('releases').set({ writes_enabled: false }).where('id', 'in', others).execute();
  // 2. Stop candidate workers from claiming.
  for (const id of others) await drainRelease(db, queues, id, opts);
  // 3. Approvals whose release changes can never be consumed.
  const report = await inTransaction(db, async (trx) => {
    await lockReleases(trx);
    let expiredApprovals = 0;
    const operations: RollbackReport['operations'] = {};
    if (others.length) {
      const expired = await trx
        .updateTable('approvals')
        .set({ expires_at: new Date() })
        .where('release_id', 'in', others)
        .where('status', 'in', ['pending', 'approved'])
        .returning('id')
        .execute();
      expiredApprovals = expired.length;
      // 4. Inventory, by status.
      const ops = await trx
        .selectFrom('operations')
        .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
        .where('release_id', 'in', others)
        .groupBy('status')
        .execute();
      for (const o of ops) operations[o.status] = Number(o.n);
      await trx.updateTable('releases').set({ status: 'retired', cohort: null }).where('id', 'in', others).execute();
    }
    // 5. Restore the former bundle for everyone.
    await trx
      .updateTable('releases')
      .set({ status: 'retired', cohort: null })
      .where('status', '=', 'active')
      .where('id', '!=', opts.to)
      .execute();
    await trx
      .insertInto('releases')
      .values({
        id: opts.to,
        manifest: JSON.stringify(former),
        status: 'active',
        writes_enabled: true,
        cohort: null,
        activated_at: new Date(),
      })
      .onConflict((oc) =>
        oc.column('id').doUpdateSet({ status: 'active', writes_enabled: true, cohort: null, draining: false, activated_at: new Date() }),
      )
      .execute();
    await recordAudit(trx, {
      type: 'release.rolled_back',
      service: 'cli',
      runId: null,
      actorHash: actorHash(opts.hmacKey, opts.operator),
      outcome: `from:${others.join(',') || 'none'};expired_approvals:${expiredApprovals}`,
      revisions: { release: opts.to },
    });
    return { expiredApprovals, operations };
  });
  let queued = 0;
  for (const id of others) queued += (await queuedJobs(queues, id)).length;
  const safety = safetySubset(former);
  return { to: opts.to, rolledBack: others, ...report, queuedJobs: queued, safety: [...safety.gate, ...safety.checks] };
}

/** Every release manifest in `releases/`, for `gatehouse release list`. */
export function releaseManifests(): ReleaseManifest[] {
  return listReleaseManifests();
}
