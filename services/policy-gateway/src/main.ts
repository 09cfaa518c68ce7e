import { creditOutage, readOutagePolicy, stopRunOnFailedStep } from '@gatehouse/ledger';
import { z } from 'zod';
import {
  assertReleaseMatchesCode,
  createServiceContext,
  createHttpApp,
  finishApp,
  listen,
  closeServer,
  installShutdown,
  holdWhileUnavailable,
  startWorkers,
  type QueueJob,
} from '@gatehouse/platform';
import { proposalsQueue, type ProposalJob } from '@gatehouse/contracts';
import { loadServiceBundles } from '@gatehouse/policy';
import { allTools, catalogDigest } from '@gatehouse/tools';
import { processProposal } from './jobs/proposals.processor.ts';

const ctx = createServiceContext('policy-gateway', {
  POLICY_GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(7111),
  /** Support bundle override (default: the release manifest's). */
  POLICY_REVISION: z.string().optional(),
  /** Active change-pack bundle (docs/product/policy-rules.md#change-rules). */
  CHANGE_POLICY_REVISION: z.string().optional(),
  /** Folder of policy bundles (default: the repository's `policy/`). */
  POLICY_DIR: z.string().optional(),
});
const { env, log, db, relay } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);
// A release force-activated past its gate (audited) boots with its bundle; any other refuses to.
const bundles = await loadServiceBundles(db, env, log);
const outagePolicy = readOutagePolicy(env.DEPENDENCY_WAIT_CEILING_MS, process.env);
catalogDigest(allTools); // a tool schema the API would reject in strict mode fails here, at boot

const workers = startWorkers(
  [
    {
      contract: proposalsQueue,
      // Held while the ledger is down; the wait is credited before the decision (ADR 0110).
      handler: (p: ProposalJob, job: QueueJob) =>
        holdWhileUnavailable(job, log, async () => {
          await creditOutage(db, p.workflowId, p.outage, outagePolicy);
          return processProposal(p, { db, relay, log, bundles, stagingUrl: env.STAGING_URL, auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY });
        }),
      onExhausted: (p: ProposalJob) => stopRunOnFailedStep(db, p.workflowId, 'proposals', 'policy-gateway').then(() => {}),
    },
  ] as never,
  { release: env.GATEHOUSE_RELEASE, prefix: env.QUEUE_PREFIX, redisUrl: env.REDIS_URL, log, gate: ctx.gate, drain: ctx.drain },
);
relay.start();
const app = finishApp(createHttpApp('policy-gateway', ctx.readyChecks), log);
const { server, port } = await listen(app, env.POLICY_GATEWAY_PORT);
log.info({ port, policies: [bundles.support.revision, bundles.change.revision] }, 'policy-gateway ready');
installShutdown(log, [() => ctx.close(workers), () => closeServer(server)]);
