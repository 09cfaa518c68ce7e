import { loadReleaseManifest, loadWorld } from '@gatehouse/contracts';
import { type Db } from '@gatehouse/ledger';
import { withCliDb } from './cli-db.ts';
import { type BaseEnv, type QueueRegistry } from '@gatehouse/platform';
import {
  drainRelease,
  resumeRelease,
  quarantineRelease,
  requeueRelease,
  requireDistinctReleases,
  withQueues,
  activateReleaseWithQueues,
  currentDigests,
  enableWrites,
  rollbackRelease,
  retireCandidate,
  checkRollbackReason,
  verifyManifest,
  analyzeCanary,
  auditAnalysis,
  formatAnalysis,
  requestCanaryOverride,
  requestActivationOverride,
  activationNeeds,
  type Operator,
  type OverrideTicket,
  type RetireReport,
} from '@gatehouse/operations';
import { EXIT, UsageError } from './commands.ts';

/**
 * Prints what `gatehouse release retire` did (ADR 0728) and returns its exit code: 0, or 4 when its
 * queues could not be paused in Redis (the retirement stands; the ledger's drain mark holds its jobs).
 */
function printRetirement(r: RetireReport, out: (line: string) => void): number {
  const back = r.active ?? 'the active release';
  out(`retired ${r.release}: its cohort ${r.cohort} goes back to ${back} (whose writes stay as they were)`);
  out(`  to put ${r.release} live later, open its canary again: gatehouse release activate ${r.release} --cohort … (ADR 0742)`);
  out(`  consequential writes off and drain marked for ${r.release}; approvals expired: ${r.expiredApprovals}`);
  out(`  operations of ${r.release} by status: ${JSON.stringify(r.operations)} (running, failed_unknown → gatehouse reconcile)`);
  if (r.queuesNotPaused) {
    out(
      `  its queues could not be paused in Redis (${r.queuesNotPaused}): workers hold its jobs by the ledger's mark; run gatehouse queues drain --release ${r.release}`,
    );
    return EXIT.unavailable;
  }
  out(`  queues paused: ${r.paused.join(', ')}`);
  if (r.queuedJobs || r.liveRuns)
    out(
      `  ${r.liveRuns} live run(s) and ${r.queuedJobs} job(s) still on ${r.release}: gatehouse queues requeue --from ${r.release} --to ${back}   or   gatehouse queues quarantine --release ${r.release}`,
    );
  return EXIT.ok;
}

/** Runs `fn` as a verified operator (see `opsCommand` in main.ts). */
type AsOperator = (command: string, fn: (db: Db, op: Operator) => Promise<number>) => Promise<number>;

/**
 * Parses `--cohort tenant:quillfeather,user:rep-ana` into tenant and user lists.
 * @throws UsageError for an entry that is not `tenant:<id>` or `user:<id>`, or names a tenant or user
 *   the directory (world.json) does not have.
 */
export function parseCohort(text: string): { tenants: string[]; users: string[] } {
  const cohort = { tenants: [] as string[], users: [] as string[] };
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const [kind, ...rest] = part.split(':');
    const id = rest.join(':');
    if (!id || (kind !== 'tenant' && kind !== 'user')) throw new UsageError(`cohort entry ${part} must be tenant:<id> or user:<id>`);
    (kind === 'tenant' ? cohort.tenants : cohort.users).push(id);
  }
  if (!cohort.tenants.length && !cohort.users.length) throw new UsageError('--cohort names no tenant or user');
  // A typo would be a cohort of no one: accepted, and nobody admitted (ADR 0683).
  const world = loadWorld();
  const tenants = world.tenants.map((t) => t.id);
  const users = world.users.map((u) => u.id);
  for (const t of cohort.tenants)
    if (!tenants.includes(t)) throw new UsageError(`--cohort names unknown tenant ${t}: one of ${tenants.join(', ')}`);
  for (const u of cohort.users) if (!users.includes(u)) throw new UsageError(`--cohort names unknown user ${u} (not in the directory)`);
  return cohort;
}

/** The flags `gatehouse release …` and `gatehouse queues …` read (main.ts's parsed command line). */
interface ReleaseValues {
  cohort?: string;
  force?: boolean;
  to?: string;
  from?: string;
  release?: string;
  reason?: string;
  baseline?: string;
  json?: boolean;
  for?: string;
}

/** One release or queues command as its steps get it: the release argument, flags, environment, printer. */
interface ReleaseRun {
  /** The command's argument (the release id), for the commands that take one. */
  release: string;
  values: ReleaseValues;
  env: BaseEnv;
  out: (line: string) => void;
  /** The operator and audit key the operations package records an action with. */
  actor: (op: Operator) => { operator: string; hmacKey: string };
}

/**
 * `gatehouse release …` and `gatehouse queues …` (docs/product/releases.md,
 * docs/product/public-contract.md#ops-cli). Everything but `release verify`
 * needs an operator token and is audited. Exit codes: 0 done, 1 refused or failed checks.
 * @throws UsageError for a malformed `--cohort`, `--for` or `--from`/`--to` pair (exit 2); a missing
 *   argument or flag was refused before (checkRequired, commands.ts).
 */
export async function releaseCommand(
  command: string,
  arg: string | undefined,
  values: ReleaseValues,
  env: BaseEnv,
  asOperator: AsOperator,
  out: (line: string) => void,
): Promise<number> {
  const actor = (op: Operator) => ({ operator: op.id, hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY });
  // Present for the commands that take it: checked before the token by checkRequired (commands.ts).
  const run: ReleaseRun = { release: arg!, values, env, out, actor };
  const withQueuesAs = (fn: (db: Db, queues: QueueRegistry, op: Operator) => Promise<number>) =>
    asOperator(command, (db, op) => withQueues(env, (queues) => fn(db, queues, op)));
  switch (command) {
    case 'release digests':
      out(JSON.stringify(currentDigests(), null, 2));
      return 0;
    case 'release verify':
      return verifyRelease(run);
    case 'release activate':
      return asOperator(command, (db, op) => activate(run, db, op));
    case 'release enable-writes':
      return asOperator(command, (db, op) => enableWritesOf(run, db, op));
    case 'release analyze':
      return asOperator(command, (db, op) => analyze(run, db, op));
    case 'release override':
      return asOperator(command, (db, op) => requestOverride(run, db, op));
    case 'release rollback':
      usableReason(values.reason, command); // a missing or malformed reason is a usage error: nothing runs
      return withQueuesAs((db, queues, op) => rollback(run, db, queues, op));
    case 'release retire':
      usableReason(values.reason, command); // a malformed reason is a usage error: nothing runs
      return withQueuesAs(async (db, queues, op) =>
        printRetirement(await retireCandidate(db, queues, run.release, { reason: values.reason!, ...actor(op) }), out),
      );
    case 'queues drain':
      return withQueuesAs(async (db, queues, op) => {
        const names = await drainRelease(db, queues, values.release!, actor(op));
        out(`draining ${values.release}: ${names.join(', ')} paused; in-flight jobs finish or their leases expire`);
        return 0;
      });
    case 'queues resume':
      return withQueuesAs(async (db, queues, op) => {
        const names = await resumeRelease(db, queues, values.release!, actor(op));
        out(`resumed ${values.release}: ${names.join(', ')}; its workers take jobs again within a few seconds`);
        return 0;
      });
    case 'queues quarantine':
      return withQueuesAs(async (db, queues, op) => {
        const q = await quarantineRelease(db, queues, values.release!, actor(op));
        out(
          `quarantined ${q.jobs} job(s) of ${values.release} into the ledger (quarantined_jobs); ${q.runs} live run(s) stopped(quarantined)`,
        );
        return 0;
      });
    case 'queues requeue':
      // A usage error (exit 2) before the token is checked: nothing runs.
      if (values.from !== undefined && values.to !== undefined) requireDistinctReleases(values.from, values.to);
      return withQueuesAs(async (db, queues, op) => {
        const r = await requeueRelease(db, queues, values.from!, values.to!, actor(op));
        out(`requeued ${r.moved} job(s) from ${values.from} to ${values.to}${r.refused ? `; ${r.refused} refused (quarantine them)` : ''}`);
        return r.refused ? 1 : 0;
      });
    default:
      throw new UsageError(`unknown command ${command}`);
  }
}

/**
 * Checks the `--reason` of `release rollback` / `release retire` ({@link checkRollbackReason}).
 * @throws UsageError with its message when the reason is missing, too long or has control characters.
 */
function usableReason(reason: string | undefined, command: string): void {
  try {
    checkRollbackReason(reason, command);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/**
 * `release verify <id>`: compares the release's manifest with this code and the applied schema
 * (no token: a read). Returns 0 when every digest matches, 1 with the problems otherwise.
 */
function verifyRelease({ release, values, env, out }: ReleaseRun): Promise<number> {
  return withCliDb(env.DATABASE_URL, 1, async (db) => {
    const problems = await verifyManifest(db, loadReleaseManifest(release));
    if (values.json) {
      out(JSON.stringify({ release, matches: problems.length === 0, problems }, null, 2));
      return problems.length ? 1 : 0;
    }
    for (const p of problems) out(`  ${p}`);
    out(problems.length ? `${release}: ${problems.length} problem(s)` : `${release}: every digest matches this code; schema applied`);
    return problems.length ? 1 : 0;
  });
}

/**
 * `release activate <id> [--cohort …] [--force]` as operator `op`: 0 once active or a candidate,
 * 4 when its queues could not be resumed in Redis (the activation stands).
 * @throws UsageError for a malformed `--cohort` ({@link parseCohort}).
 */
async function activate({ release, values, env, out, actor }: ReleaseRun, db: Db, op: Operator): Promise<number> {
  const a = await activateReleaseWithQueues(db, env, release, {
    cohort: values.cohort ? parseCohort(values.cohort) : undefined,
    force: values.force,
    ...actor(op),
  });
  for (const b of a.bypassed) out(`  FORCED past ${b}`);
  out(
    a.status === 'candidate'
      ? `${a.id} is a candidate for ${values.cohort}; consequential writes stay disabled until: gatehouse release enable-writes ${a.id}`
      : `${a.id} is the active release${a.forced ? ' (FORCED past its boundary-case gate; audited)' : ''}`,
  );
  // Each run stays on the release it started on: stopping that release's services strands them.
  if (a.former?.liveRuns)
    out(
      `  ${a.former.liveRuns} live run(s) stay on ${a.former.id}, the release each started on: keep ${a.former.id}'s services running until they end, or move them: gatehouse queues drain --release ${a.former.id}, then gatehouse queues requeue --from ${a.former.id} --to ${a.id}`,
    );
  if (!a.queuesNotResumed) return EXIT.ok;
  out(`  its queues could not be resumed in Redis (${a.queuesNotResumed}): run gatehouse queues resume --release ${a.id}`);
  return EXIT.unavailable;
}

/** `release enable-writes <id>` as operator `op`: prints what passed and returns 0 (a refusal throws). */
async function enableWritesOf({ release, env, out }: ReleaseRun, db: Db, op: Operator): Promise<number> {
  const w = await enableWrites(db, release, op.id, env.GATEHOUSE_AUDIT_HMAC_KEY);
  for (const f of w.forcedPast) out(`  FORCED past ${f} (at activation; audited)`);
  out(
    `${w.id}: safety cases pass (${w.boundaryCases} boundary cases, closed parsing, strict schemas)` +
      `${w.canary === 'not_a_candidate' ? '' : w.canary === 'pass' ? '; canary analysis passes' : '; canary analysis OVERRIDDEN by a second person (audited)'}` +
      '; consequential writes enabled',
  );
  return 0;
}

/** `release analyze <id> [--baseline …]` as operator `op`, audited: 0 when the canary passes, 1 otherwise. */
async function analyze({ release, values, env, out }: ReleaseRun, db: Db, op: Operator): Promise<number> {
  const a = await analyzeCanary(db, release, { baseline: values.baseline });
  await auditAnalysis(db, a, op.id, env.GATEHOUSE_AUDIT_HMAC_KEY);
  if (values.json) out(JSON.stringify(a, null, 2));
  else for (const line of formatAnalysis(a)) out(line);
  return a.verdict === 'pass' ? 0 : 1;
}

/**
 * `release override <id> --for canary|force|raise-limits --reason …` as operator `op`: asks a
 * second person's approval of the override and returns 0.
 * @throws UsageError for another `--for` (after the token check).
 */
async function requestOverride({ release, values, out, actor }: ReleaseRun, db: Db, op: Operator): Promise<number> {
  const ask = { ...actor(op), reason: values.reason! };
  const kind = values.for ?? 'canary';
  let t: OverrideTicket;
  if (kind === 'canary') t = await requestCanaryOverride(db, release, ask);
  else if (kind === 'force' || kind === 'raise-limits') {
    const wanted = kind === 'force' ? 'force_gate' : 'raise_limits';
    const found = (await activationNeeds(db, release, { force: true })).find((n) => n.kind === wanted);
    t = await requestActivationOverride(db, release, found ?? { kind: wanted, items: [] }, ask);
  } else throw new UsageError(`--for ${kind}: one of canary, force, raise-limits`);
  out(`override requested for ${release} (${kind}): approval ${t.approvalId}, digest ${t.actionDigest}`);
  out(
    `  a policy owner or an operator of ${t.tenant} other than you decides it before ${t.expiresAt.toISOString()} — approval inbox, or POST /v1/approvals/${t.approvalId}/decision; the next ${kind === 'canary' ? 'enable-writes or promotion' : 'activation'} of ${release} uses it once`,
  );
  return 0;
}

/**
 * `release rollback --to <id> --reason …` as operator `op`: 0 when rolled back to a release that
 * passes its safety cases, 1 when it does not (its consequential writes stay off).
 */
async function rollback({ values, out, actor }: ReleaseRun, db: Db, queues: QueueRegistry, op: Operator): Promise<number> {
  const r = await rollbackRelease(db, queues, { to: values.to!, reason: values.reason!, onStep: out, ...actor(op) });
  out(`rolled back ${r.rolledBack.join(', ')} to ${r.to}`);
  for (const f of r.safety) out(`  SAFETY ${f}`);
  // From the ledger too: a run waiting on its approval has no job queued, and waits there all the same.
  if (r.queuedJobs || r.liveRuns) {
    out(`  ${r.liveRuns} live run(s) and ${r.queuedJobs} job(s) still on ${r.rolledBack.join(', ')}: choose for each release —`);
    for (const c of r.rolledBack)
      out(`    gatehouse queues requeue --from ${c} --to ${r.to}   or   gatehouse queues quarantine --release ${c}`);
  }
  out(
    r.safety.length
      ? `  consequential writes stay OFF: ${r.to} fails its safety cases (docs/runbooks/rollback.md)`
      : `  next: gatehouse release enable-writes ${r.to}   (consequential writes are off until then; docs/runbooks/rollback.md)`,
  );
  return r.safety.length ? 1 : 0;
}
