import { z } from 'zod';
import {
  assertReleaseMatchesCode,
  ed25519KeyFileProblems,
  createServiceContext,
  createHttpApp,
  finishApp,
  listen,
  closeServer,
  installShutdown,
  createWorker,
  holdWhileUnavailable,
  delegationSigningKeyEnv,
  auditGateEnv,
  auditGateOf,
  type QueueJob,
} from '@gatehouse/platform';
import { loadDelegationSigningKey } from '@gatehouse/credentials';
import { listStuckRuns, noteOutageWait, readOutagePolicy } from '@gatehouse/ledger';
import { observeStuckRuns } from '@gatehouse/telemetry';
import { executionsQueue, loadWorld, type ExecutionJob } from '@gatehouse/contracts';
import { processExecution } from './jobs/executions.processor.ts';
import { startReconcileJob } from './jobs/reconcile.processor.ts';
import { startWatchdog } from './jobs/watchdog.ts';
import { readTestHooks } from './domain/test-hooks.ts';
import { DelegationTrust } from './domain/delegation-trust.ts';
import { loadServiceBundles } from '@gatehouse/policy';

/** What a lease must hold beyond the adapter's deadline, ms: the claim's commit, the write-ahead mark and the record fall outside that deadline. */
const LEASE_MARGIN_MS = 5000;

const ctx = createServiceContext(
  'executor',
  {
    ...delegationSigningKeyEnv,
    EXECUTOR_PORT: z.coerce.number().int().min(0).max(65535).default(7112),
    EXECUTOR_CONCURRENCY: z.coerce.number().int().positive().default(8),
    /** Lease on an operation, ms (longer than the adapter deadline). */
    LEASE_MS: z.coerce.number().int().positive().default(30_000),
    /** Deadline for one execution's adapter calls, ms. */
    EXECUTION_DEADLINE_MS: z.coerce.number().int().positive().default(15_000),
    /** BullMQ job lock and stalled-job check, ms: how soon a dead worker's job is redelivered. */
    EXECUTOR_LOCK_MS: z.coerce.number().int().positive().default(15_000),
    EXECUTOR_STALLED_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
    ...auditGateEnv,
    /** Support bundle override (default: the release manifest's). */
    POLICY_REVISION: z.string().optional(),
    /** Active change-pack bundle (docs/product/policy-rules.md#change-rules). */
    CHANGE_POLICY_REVISION: z.string().optional(),
    /** Folder of policy bundles (default: the repository's `policy/`). */
    POLICY_DIR: z.string().optional(),
    /** Repeatable reconciliation pass, ms between passes (0: only on demand). */
    RECONCILE_INTERVAL_MS: z.coerce.number().int().nonnegative().default(60_000),
    /** Reference support bundle reconciliation judges refunds against (never a bundle failing its gate). */
    RECONCILE_SUPPORT_REVISION: z.string().default('support-p1'),
    /** Watchdog (docs/decisions/0100): ms between passes over live runs whose jobs may be lost. */
    WATCHDOG_INTERVAL_MS: z.coerce.number().int().positive().default(5_000),
    /** A run is looked at once its last state change is this old, ms. */
    WATCHDOG_GRACE_MS: z.coerce.number().int().positive().default(5_000),
    /** Re-drives of one run before the watchdog stops it as `stopped(step_failed)`. */
    WATCHDOG_MAX_REDRIVES: z.coerce.number().int().positive().default(5),
  },
  process.env,
  // Production: the delegation signing key comes from the secret store, named explicitly (ADR 0170);
  // a lease must outlive the adapter's deadline, or a second executor may claim an operation while
  // its holder is still calling (fencing still refuses the stale write; tests set it on purpose).
  (e) => [
    ...ed25519KeyFileProblems(
      'GATEHOUSE_DELEGATION_SIGNING_KEY_PATH',
      e.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH,
      process.env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH !== undefined,
    ),
    ...(e.LEASE_MS >= e.EXECUTION_DEADLINE_MS + LEASE_MARGIN_MS
      ? []
      : [
          `LEASE_MS: ${e.LEASE_MS} ms must be at least EXECUTION_DEADLINE_MS (${e.EXECUTION_DEADLINE_MS} ms) + ${LEASE_MARGIN_MS} ms for the claim's commit and the record`,
        ]),
  ],
);
const hooks = readTestHooks(process.env);
const outagePolicy = readOutagePolicy(ctx.env.DEPENDENCY_WAIT_CEILING_MS, process.env);
const { env, log, db, relay } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);
// A release force-activated past its gate (audited) boots with its bundle; any other refuses to.
const bundles = await loadServiceBundles(db, env, log);
const agentId = loadWorld().agent.id;
// Only the minting side holds the private key; the systems of record verify with its JWKS.
const signingKey = await loadDelegationSigningKey(env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH);
const auditGate = auditGateOf(env);
// Not ready, and holding its execution jobs, while the systems of record do not list that key:
// they would refuse every token it mints (ADR 0761, 0767).
const delegationTrust = await DelegationTrust.of(env.STAGING_URL, signingKey, log);
ctx.readyChecks.delegationKey = delegationTrust.readyCheck;

const worker = createWorker(
  executionsQueue,
  (p: ExecutionJob, job: QueueJob) =>
    holdWhileUnavailable(
      job,
      log,
      () =>
        processExecution(p, {
          db,
          relay,
          log,
          stagingUrl: env.STAGING_URL,
          signingKey,
          auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
          leaseMs: env.LEASE_MS,
          deadlineMs: env.EXECUTION_DEADLINE_MS,
          agentId,
          hooks,
          bundles,
          auditGate,
          outagePolicy,
        }),
      (mark) => noteOutageWait(db, p.workflowId, mark, outagePolicy),
    ),
  {
    release: env.GATEHOUSE_RELEASE,
    prefix: env.QUEUE_PREFIX,
    redisUrl: env.REDIS_URL,
    log,
    gate: ctx.gate,
    drain: ctx.drain,
    holds: [delegationTrust],
    concurrency: env.EXECUTOR_CONCURRENCY,
    lockDurationMs: env.EXECUTOR_LOCK_MS,
    stalledIntervalMs: env.EXECUTOR_STALLED_INTERVAL_MS,
  },
);
const { worker: reconciler, scheduled } = startReconcileJob(
  {
    db,
    relay,
    log,
    stagingUrl: env.STAGING_URL,
    signingKey,
    auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
    release: env.GATEHOUSE_RELEASE,
    supportRevision: env.RECONCILE_SUPPORT_REVISION,
    changeRevision: bundles.change.revision,
    policyDir: env.POLICY_DIR,
    auditGate,
    delegationTrust,
  },
  {
    queues: ctx.queues,
    gate: ctx.gate,
    drain: ctx.drain,
    prefix: env.QUEUE_PREFIX,
    redisUrl: env.REDIS_URL,
    intervalMs: env.RECONCILE_INTERVAL_MS,
  },
);
// The schedule waits for Redis in the background; any other failure to set it refuses the boot
// (gracefully once the shutdown is installed).
const stopping: { shutdown?: (exitCode?: number) => Promise<void> } = {};
scheduled.catch((err: unknown) => {
  log.error({ err: (err as Error).message }, 'could not set the reconcile schedule; stopping');
  if (stopping.shutdown) void stopping.shutdown(1);
  else process.exit(1);
});
// Live runs past their no-progress bound, by state, for the stuck-runs alert (ADR 0260).
observeStuckRuns(async () => (await listStuckRuns(db, Date.now(), 1000)).map((r) => r.state));
const watchdog = hooks.disableWatchdog
  ? null
  : startWatchdog(
      {
        db,
        queues: ctx.queues,
        relay,
        log,
        settings: {
          release: env.GATEHOUSE_RELEASE,
          graceMs: env.WATCHDOG_GRACE_MS,
          maxRedrives: env.WATCHDOG_MAX_REDRIVES,
          redisTimeoutMs: 2_000,
          batch: 200,
        },
      },
      env.WATCHDOG_INTERVAL_MS,
    );
relay.start();
const app = finishApp(createHttpApp('executor', ctx.readyChecks), log);
const { server, port } = await listen(app, env.EXECUTOR_PORT);
log.info({ port }, 'executor ready');
stopping.shutdown = installShutdown(log, [() => ctx.close([worker, reconciler]), async () => watchdog?.stop(), () => closeServer(server)]);
