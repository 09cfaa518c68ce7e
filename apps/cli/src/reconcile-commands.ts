import type { DelegationSigningKey } from '@gatehouse/credentials';
import { auditGateFromEnv, dependencyCheckHint, hostOf } from '@gatehouse/platform';
import { DependencyUnavailable, listStuckRuns, type Db, type OutboxRow, type Remediation, type StuckRun } from '@gatehouse/ledger';
import {
  executeApprovedRemediations,
  executeRemediation,
  findItem,
  ReadBackUnavailable,
  remediationsOf,
  requestRemediation,
  runReconciliation,
  type ExecuteDeps,
  type RemediationOutcome,
  type RetryWait,
  type WorklistItem,
} from '@gatehouse/reconciliation';
import { EXIT, UsageError } from './commands.ts';

/** What the reconcile commands need from the CLI: ledger, systems of record, secrets, output. */
export interface ReconcileContext {
  db: Db;
  /** The ledger's URL (`DATABASE_URL`), to name Postgres in an exit-4 message; optional. */
  databaseUrl?: string;
  stagingUrl: string;
  hmacKey: string;
  /**
   * Ed25519 key minting the remediations' delegated tokens, when this operator's machine holds it
   * (`GATEHOUSE_DELEGATION_SIGNING_KEY_PATH`); without it approved remediations are left to the
   * executor's reconcile job (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
   */
  signingKey?: DelegationSigningKey;
  release: string;
  /** The verified operator running the command. */
  operator: string;
  /** Print one JSON document (`gatehouse reconcile --json`) instead of lines. */
  json?: boolean;
  out: (line: string) => void;
  /** Publishes outbox rows (results of resumed calls) after their transaction committed. */
  publish: (rows: OutboxRow[]) => Promise<void>;
}

/**
 * `err` as the reconcile commands report it: a system of record that could not be read (the pass's
 * `ReadBackUnavailable`: no answer, a 5xx, an unreadable body) becomes
 * {@link DependencyUnavailable}(`system_of_record`) naming `stagingUrl`'s `host:port` and how to
 * check it (exit 4, "a dependency is unreachable"); anything else is returned as it is.
 */
export function asSystemOfRecordFault(err: unknown, stagingUrl: string): unknown {
  if (!(err instanceof ReadBackUnavailable)) return err;
  return new DependencyUnavailable(
    'system_of_record',
    `the systems of record (${hostOf(stagingUrl)}) could not be read: ${err.message}; the pass stopped without classifying anything; ` +
      `${dependencyCheckHint('system_of_record', stagingUrl)}, then run the command again`,
    { cause: err },
  );
}

/**
 * The exit-4 error ({@link DependencyUnavailable}) of a `retry` outcome that waits on an outage —
 * `system_of_record`: `system` (e.g. "the change service", at `ctx.stagingUrl`) did not process
 * the call (no answer, 408, 429, 5xx; nothing was done and the same key is sent on the next run);
 * `postgres`: the credential epoch could not be read (nothing claimed or sent) — naming the server
 * and how to check it, so a command never exits 0 for work it did not do. `subject` names the work
 * ("the cancel of <key>"), `reason` is the outcome's. Null for a wait that is not an outage
 * (containment, audit storage): the command reports those itself.
 */
export function outageOf(
  ctx: Pick<ReconcileContext, 'stagingUrl' | 'databaseUrl'>,
  o: { waitingFor: RetryWait; reason: string },
  subject: string,
  system: string,
): DependencyUnavailable | null {
  const again = 'then run this command again (same key, idempotent)';
  if (o.waitingFor.on === 'system_of_record')
    return new DependencyUnavailable(
      'system_of_record',
      `${subject} did not run: ${system} (${hostOf(ctx.stagingUrl)}) did not process it (${o.reason}); nothing was done; ` +
        `${dependencyCheckHint('system_of_record', ctx.stagingUrl)}, ${again}`,
    );
  if (o.waitingFor.on === 'postgres') {
    const where = ctx.databaseUrl ? ` (${hostOf(ctx.databaseUrl)})` : '';
    const hint = ctx.databaseUrl ? dependencyCheckHint('postgres', ctx.databaseUrl) : 'check DATABASE_URL and that Postgres answers';
    return new DependencyUnavailable(
      'postgres',
      `${subject} did not run: Postgres${where} did not answer reading the credential epoch (${o.reason}); nothing was claimed or sent; ${hint}, ${again}`,
    );
  }
  return null;
}

/** The remediation flags of `gatehouse reconcile resolve`, by remediation. */
export const REMEDIATION_FLAGS: Record<string, Remediation> = {
  ratify: 'ratify',
  reverse: 'reverse',
  'cancel-shipment': 'cancel_shipment',
  adopt: 'adopt',
  replay: 'replay',
};

/**
 * The `--outcome <operationKey>=<shipmentId|none>` flags of `reconcile resolve` as the outcomes a
 * ratification of undecided reships names (`none` → null), or undefined when none was given.
 * @throws UsageError for a flag without `=`, an empty side, or one operation named twice.
 */
export function parseOutcomes(flags: readonly string[] | undefined): Record<string, string | null> | undefined {
  if (!flags?.length) return undefined;
  const out: Record<string, string | null> = {};
  for (const f of flags) {
    const at = f.indexOf('=');
    const key = at > 0 ? f.slice(0, at).trim() : '';
    const value = at > 0 ? f.slice(at + 1).trim() : '';
    if (!key || !value) throw new UsageError(`--outcome takes <operationKey>=<shipmentId|none>, not ${f}`);
    if (key in out) throw new UsageError(`--outcome names ${key} twice`);
    out[key] = value === 'none' ? null : value;
  }
  return out;
}

function remediationDeps(ctx: ReconcileContext) {
  return { db: ctx.db, stagingUrl: ctx.stagingUrl, hmacKey: ctx.hmacKey, release: ctx.release };
}

function deps(ctx: ReconcileContext, signingKey: DelegationSigningKey): ExecuteDeps {
  return { ...remediationDeps(ctx), signingKey, auditGate: auditGateFromEnv() };
}

/** Said when this CLI holds no signing key: the executor's reconcile job executes approved remediations. */
const LEFT_TO_THE_EXECUTOR =
  'no delegation signing key here (GATEHOUSE_DELEGATION_SIGNING_KEY_PATH): the executor’s reconcile job executes approved remediations';

/**
 * One worklist line: id, status, class, owner, subject, amount (currency units), and the
 * remediation under way — or, when none is, the ones its class allows (`fixes=--replay|--ratify`,
 * the flags of `gatehouse reconcile resolve`; none for a class repaired automatically).
 */
export function formatItem(i: WorklistItem): string {
  const amount = i.amount_cents === null ? '' : `  ${(Number(i.amount_cents) / 100).toFixed(2)}`;
  const allowed = remediationsOf(i.class, i.tool);
  const fixes = allowed.length ? `  fixes=${allowed.map((r) => `--${r.replaceAll('_', '-')}`).join('|')}` : '';
  const remedy = i.remediation ? `  remediation=${i.remediation} approval=${i.approval_id}` : fixes;
  return `  ${i.id}  ${i.status.padEnd(6)}  ${i.class.padEnd(34)}  owner=${i.owner.padEnd(13)}  ${i.subject}${amount}${remedy}`;
}

/** One stuck-run line: workflow, state, age against its bound, the jobs it waits for, the watchdog's re-drives. */
export function formatStuck(r: StuckRun): string {
  const waits = r.waitingFor.length ? r.waitingFor.join(',') : 'nothing';
  const wd = r.watchdog
    ? `re-driven ${r.watchdog.count}x, last ${r.watchdog.outcome} at ${new Date(r.watchdog.atMs).toISOString()}`
    : 'not re-driven';
  return `  ${r.workflowId}  ${r.state.padEnd(17)}  age=${Math.round(r.ageMs / 1000)}s (bound ${Math.round(r.boundMs / 1000)}s)  waiting-for=${waits}  watchdog: ${wd}`;
}

/**
 * The line for a remediation containment holds (`waitingFor` `containment`, ADR 0692): what holds
 * it and what lets it run; null for another wait.
 */
function heldByContainment(itemId: string, wait: RetryWait): string | null {
  if (wait.on !== 'containment') return null;
  const tool = wait.tool;
  return `item ${itemId}: held — ${tool} is switched off (containment); nothing was sent and its approval is unused. It runs at the next reconcile once \`gatehouse switch on ${tool}\` or a re-enable stage admits its tenant`;
}

/**
 * One line for a remediation's outcome, as `reconcile` and `reconcile resolve` print it; a `retry`
 * held by containment names the tool from its typed `waitingFor` (never parsed from `reason`).
 */
export function formatOutcome(o: RemediationOutcome): string {
  switch (o.state) {
    case 'resolved':
      return `item ${o.itemId} resolved: ${o.resolution}`;
    case 'awaiting_approval':
      return `item ${o.itemId}: refused — approval ${o.approvalId} is still pending; a lead must decide it (POST /v1/approvals/${o.approvalId}/decision), then run this command again`;
    case 'busy':
      return `item ${o.itemId}: another process is executing its remediation${untilLeaseEnds(o.leaseUntil)}`;
    case 'failed':
      return `item ${o.itemId}: failed (${o.reason}) — ${o.nextStep}`;
    case 'retry':
      return heldByContainment(o.itemId, o.waitingFor) ?? `item ${o.itemId}: retry (${o.reason})`;
    default:
      return `item ${o.itemId}: ${o.state} (${o.reason})`;
  }
}

/**
 * A remediation of a live worklist item that has not run after this `reconcile`: its approval
 * still pending, or approved and waiting (`why`), with the operator's next step (docs/decisions/0705).
 */
export interface WaitingRemediation {
  itemId: string;
  remediation: string;
  approvalId: string;
  approval: 'pending' | 'approved';
  /** The approver (null while pending). */
  approver: string | null;
  /** Why it has not run: `awaiting_approval`, `no_signing_key`, `containment:<tool>`, `audit`, `system_of_record`, `postgres`, `busy`, `not_run`. */
  why: string;
  next: string;
}

/**
 * The remediations of `worklist` (live items after the pass) whose approval is pending or approved
 * but unused, each with why it has not run — from this run's `outcomes`, else no signing key here
 * (`hasKey` false: the executor's reconcile job runs it) — and the next step. Read from the ledger.
 */
export async function waitingRemediations(
  db: Db,
  worklist: WorklistItem[],
  outcomes: RemediationOutcome[],
  hasKey: boolean,
): Promise<WaitingRemediation[]> {
  const asked = worklist.filter((i) => i.approval_id && i.remediation);
  if (!asked.length) return [];
  const approvals = await db
    .selectFrom('approvals')
    .select(['id', 'status', 'approver'])
    .where(
      'id',
      'in',
      asked.map((i) => i.approval_id!),
    )
    .where('status', 'in', ['pending', 'approved'])
    .execute();
  const byId = new Map(approvals.map((a) => [a.id, a]));
  return asked.flatMap((i): WaitingRemediation[] => {
    const a = byId.get(i.approval_id!);
    if (!a) return [];
    const base = { itemId: i.id, remediation: i.remediation!, approvalId: a.id, approver: a.approver };
    if (a.status === 'pending')
      return [
        {
          ...base,
          approval: 'pending' as const,
          why: 'awaiting_approval',
          next: `a lead decides approval ${a.id} (approval inbox, or POST /v1/approvals/${a.id}/decision); then gatehouse reconcile resolve ${i.id}`,
        },
      ];
    return [
      {
        ...base,
        approval: 'approved' as const,
        ...whyWaiting(
          i.id,
          outcomes.find((o) => o.itemId === i.id),
          hasKey,
        ),
      },
    ];
  });
}

/** Why an approved remediation of item `itemId` has not run, from this run's outcome `o`, and what runs it. */
function whyWaiting(itemId: string, o: RemediationOutcome | undefined, hasKey: boolean): { why: string; next: string } {
  const resolve = `gatehouse reconcile resolve ${itemId}`;
  if (!hasKey)
    return {
      why: 'no_signing_key',
      next: `the executor's reconcile job runs it (every RECONCILE_INTERVAL_MS, default 60 s), or run gatehouse reconcile where GATEHOUSE_DELEGATION_SIGNING_KEY_PATH names the delegation signing key`,
    };
  if (o?.state === 'busy')
    return { why: 'busy', next: `another process is executing it${untilLeaseEnds(o.leaseUntil)}; ${resolve} shows its outcome` };
  if (o?.state === 'retry') {
    const w = o.waitingFor;
    if (w.on === 'containment')
      return {
        why: `containment:${w.tool}`,
        next: `gatehouse switch on ${w.tool} (or a re-enable stage admitting its tenant), then ${resolve}`,
      };
    if (w.on === 'audit')
      return { why: 'audit', next: `audit storage is unhealthy: check the audit service (gatehouse stack status), then ${resolve}` };
    return {
      why: w.on,
      next: `${w.on === 'postgres' ? 'Postgres' : 'the systems of record'} did not process it (${o.reason}); ${resolve}`,
    };
  }
  return { why: 'not_run', next: resolve };
}

/** One line of the waiting remediations: item, remediation, approval and its state, why, next step. */
export function formatWaiting(w: WaitingRemediation): string {
  const state = w.approval === 'pending' ? 'pending' : `approved by ${w.approver ?? '?'}`;
  return `  item ${w.itemId}: ${w.remediation} (approval ${w.approvalId}, ${state}) — waiting: ${w.why}. Next: ${w.next}`;
}

/**
 * `gatehouse reconcile`: executes remediations leads approved, runs one reconciliation pass
 * (docs/product/reconciliation.md) and prints the live worklist, the stuck runs (live runs past
 * their no-progress bound, with the jobs they wait for and the watchdog's re-drives) and a
 * summary, then each remediation still waiting — pending, or approved and not run, with why and the
 * next step ({@link waitingRemediations}); publishes the results of resumed calls.
 * Returns the exit code: 0 — the pass ran; what is left to do (open items, waiting remediations) is
 * printed, not an exit code (docs/decisions/0705).
 */
export async function reconcileCommand(ctx: ReconcileContext): Promise<number> {
  const say = ctx.json ? () => undefined : ctx.out;
  if (!ctx.signingKey) say(LEFT_TO_THE_EXECUTOR);
  const remediations = ctx.signingKey ? await executeApprovedRemediations(deps(ctx, ctx.signingKey)) : [];
  for (const o of remediations) {
    if (o.state === 'resolved') await ctx.publish(o.rows);
    say(formatOutcome(o));
  }
  const r = await runReconciliation({ db: ctx.db, stagingUrl: ctx.stagingUrl, hmacKey: ctx.hmacKey, actor: ctx.operator });
  await ctx.publish(r.rows);
  const resumed = r.findings.filter((d) => d.disposition === 'resumed').map((d) => d.finding);
  const stuck = await listStuckRuns(ctx.db);
  const frozen = r.worklist.filter((i) => i.status === 'frozen').length;
  const waiting = await waitingRemediations(ctx.db, r.worklist, remediations, Boolean(ctx.signingKey));
  if (ctx.json) {
    const { rows: _published, findings, ...run } = r;
    const outcomes = remediations.map((o) => (o.state === 'resolved' ? { ...o, rows: undefined } : o));
    ctx.out(
      JSON.stringify({ ...run, compared: findings.length, frozen, remediations: outcomes, waiting, resumed, stuckRuns: stuck }, null, 2),
    );
    return 0;
  }
  for (const f of resumed) say(`resumed ${f.tool} ${f.operationKey}: ${f.resume?.evidenceRef}`);
  say(`worklist (${r.worklist.length}):`);
  for (const i of r.worklist) say(formatItem(i));
  say(
    `classes: ${Object.entries(r.counts)
      .map(([c, n]) => `${c}=${n}`)
      .join(' ')}`,
  );
  say(`remediations waiting (${waiting.length}):`);
  for (const w of waiting) say(formatWaiting(w));
  say(`stuck runs (${stuck.length}):`);
  for (const s of stuck) say(formatStuck(s));
  say(
    `run ${r.runId}: ${r.findings.length} compared; ${r.counts.matched} matched, ${r.resumed} resumed, ${r.explained} explained, ${r.vanished} vanished; ${r.unexplained} unexplained (${r.unexplained - frozen} open, ${frozen} frozen)`,
  );
  return 0;
}

/**
 * `gatehouse reconcile resolve <itemId> [--ratify|--reverse|--cancel-shipment|--adopt|--replay]
 * [--outcome <operationKey>=<shipmentId|none> ...]`: with a remediation flag, asks a lead for it
 * (`outcomes`: what a ratification of undecided reships names, {@link parseOutcomes}) (an approval request decided through the approval
 * API) — or, once the lead approved that same remediation, executes it exactly once; without a
 * flag, executes the remediation already requested. Prints what a lead must decide or the outcome.
 * Returns the exit code, as `change cancel` does (`EXIT` in commands.ts): 0 when requested,
 * resolved, held by containment (it runs at a later reconcile once the tool is admitted) or left
 * to the executor's reconcile job; 1 when nothing was done — its approval still pending, another
 * process executing it, refused or failed — so a script can tell a run that did nothing.
 * @throws RemediationRefused when the item, class or state does not allow it.
 * @throws DependencyUnavailable (exit 4) when the system of record did not process the
 *   compensating call (no answer, 408, 429, 5xx) or Postgres did not answer reading the credential
 *   epoch: nothing was done, the same key is sent on the next run ({@link outageOf}).
 */
export async function resolveCommand(
  ctx: ReconcileContext,
  itemId: string,
  remediation: Remediation | undefined,
  outcomes?: Record<string, string | null>,
): Promise<number> {
  const item = await findItem(ctx.db, itemId);
  const asked = item.approval_id && (remediation === undefined || remediation === item.remediation);
  if (!asked) {
    if (!remediation) {
      ctx.out(`item ${item.id} has no remediation requested: add one of --${Object.keys(REMEDIATION_FLAGS).join(', --')}`);
      return 1;
    }
    const t = await requestRemediation(remediationDeps(ctx), { itemId: item.id, remediation, operator: ctx.operator, outcomes });
    ctx.out(
      `${t.existing ? 'already requested' : 'requested'}: ${t.remediation} of item ${t.itemId} — approval ${t.approvalId} (action v${t.actionVersion}, digest ${t.actionDigest}, key ${t.operationKey})`,
    );
    ctx.out(
      `  a ${t.approverRole} of ${t.tenant}${t.region ? ` in ${t.region}` : ''}${t.amountCents !== null ? ` with an approve limit of at least ${(t.amountCents / 100).toFixed(2)}` : ''} must decide it before ${t.expiresAt.toISOString()} (POST /v1/approvals/${t.approvalId}/decision); then run this command again`,
    );
    return 0;
  }
  if (!ctx.signingKey) {
    ctx.out(`item ${item.id}: ${LEFT_TO_THE_EXECUTOR}`);
    return 0;
  }
  const o = await executeRemediation(deps(ctx, ctx.signingKey), item.id);
  if (o.state === 'resolved') await ctx.publish(o.rows);
  const outage =
    o.state === 'retry' ? outageOf(ctx, o, `the ${item.remediation ?? 'remediation'} of item ${item.id}`, 'the systems of record') : null;
  if (outage) throw outage;
  ctx.out(formatOutcome(o));
  return o.state === 'resolved' || o.state === 'retry' ? EXIT.ok : EXIT.failed;
}

/**
 * What a busy outcome adds about the lease it waits for: when it ends (ISO 8601) and that a run
 * after it takes over — the holder may be a CLI that died, which keeps its lease until then.
 * Empty when the lease is not known (a newer claim fenced this one out).
 */
export function untilLeaseEnds(leaseUntil: Date | undefined): string {
  if (!leaseUntil) return '';
  return ` (its lease ends at ${leaseUntil.toISOString()}: if that process died, run this command again after then and it takes over)`;
}
