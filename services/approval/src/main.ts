import { creditOutage, readOutagePolicy, stopRunOnFailedStep } from '@gatehouse/ledger';
import { z } from 'zod';
import {
  assertReleaseMatchesCode,
  createServiceContext,
  listen,
  closeServer,
  installShutdown,
  startWorkers,
  holdWhileUnavailable,
  userTokenVerifier,
  limiterFromEnv,
  type QueueJob,
} from '@gatehouse/platform';
import { approvalRequestsQueue, type ApprovalRequestJob } from '@gatehouse/contracts';
import { loadServiceBundles } from '@gatehouse/policy';
import { createApprovalApp } from './http/app.ts';
import { processApprovalRequest } from './jobs/approval-requests.processor.ts';
import { sweepExpiredApprovals } from './jobs/expiry.sweep.ts';

const ctx = createServiceContext('approval', {
  APPROVAL_PORT: z.coerce.number().int().min(0).max(65535).default(7102),
  /** Support bundle override (default: the release manifest's). */
  POLICY_REVISION: z.string().optional(),
  /** Active change-pack bundle (docs/product/policy-rules.md#change-rules). */
  CHANGE_POLICY_REVISION: z.string().optional(),
  /** Folder of policy bundles (default: the repository's `policy/`). */
  POLICY_DIR: z.string().optional(),
  /** How often pending approvals are checked for expiry, ms. */
  EXPIRY_SWEEP_MS: z.coerce.number().int().positive().default(5000),
});
const { env, log, db, relay } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);
// A release force-activated past its gate (audited) boots with its bundle; any other refuses to.
const bundles = await loadServiceBundles(db, env, log);
const outagePolicy = readOutagePolicy(env.DEPENDENCY_WAIT_CEILING_MS, process.env);
const app = createApprovalApp({
  db,
  relay,
  auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
  verifier: userTokenVerifier(env),
  localSecret: env.GATEHOUSE_AUTH_JWKS_URL || env.GATEHOUSE_ENV === 'production' ? null : env.GATEHOUSE_AUTH_SECRET,
  secureCookie: env.GATEHOUSE_ENV === 'production',
  signInLimiter: limiterFromEnv(ctx.redis, env, 'signin'),
  log,
  readyChecks: ctx.readyChecks,
  responseDeadlineMs: env.HTTP_RESPONSE_DEADLINE_MS,
});

const workers = startWorkers(
  [
    {
      contract: approvalRequestsQueue,
      // Held while the ledger is down; the wait is credited before the request (ADR 0110).
      handler: (p: ApprovalRequestJob, job: QueueJob) =>
        holdWhileUnavailable(job, log, async () => {
          await creditOutage(db, p.workflowId, p.outage, outagePolicy);
          return processApprovalRequest(p, { db, bundles });
        }),
      onExhausted: (p: ApprovalRequestJob) => stopRunOnFailedStep(db, p.workflowId, 'approval-requests', 'approval').then(() => {}),
    },
  ] as never,
  { release: env.GATEHOUSE_RELEASE, prefix: env.QUEUE_PREFIX, redisUrl: env.REDIS_URL, log, gate: ctx.gate, drain: ctx.drain },
);
relay.start();
const sweep = setInterval(() => {
  sweepExpiredApprovals({ db, relay }).catch((err: unknown) => log.warn({ err: (err as Error).message }, 'expiry sweep failed'));
}, env.EXPIRY_SWEEP_MS);
const { server, port } = await listen(app, env.APPROVAL_PORT);
log.info({ port }, 'approval ready');
installShutdown(log, [() => ctx.close(workers), () => clearInterval(sweep), () => closeServer(server)]);
