import {
  createServiceContext,
  createHttpApp,
  finishApp,
  listen,
  closeServer,
  installShutdown,
  startWorkers,
  requireUser,
  userTokenVerifier,
} from '@gatehouse/platform';
import { turnsQueue, resultsQueue, loadReleaseManifest, type TurnJob, type ResultJob } from '@gatehouse/contracts';
import { registerRelease, releaseForced } from '@gatehouse/ledger';
import { catalogDigest, toolsOfPack, type Pack } from '@gatehouse/tools';
import { loadActiveBundles, policyRevisions } from '@gatehouse/policy';
import { agentLoopEnv } from './env.ts';

import { ticketsRouter } from './http/tickets.router.ts';
import { workflowsRouter } from './http/workflows.router.ts';
import { createModelClient, LOCAL_MODEL_STUB_URL } from './domain/model-client.ts';
import { processTurn } from './jobs/turns.processor.ts';
import { readLoopTestHooks } from './domain/test-hooks.ts';
import { processResult } from './jobs/results.processor.ts';

const ctx = createServiceContext('agent-loop', agentLoopEnv);
const { env, log, db, relay } = ctx;
const hooks = readLoopTestHooks(process.env);
const release = loadReleaseManifest(env.GATEHOUSE_RELEASE);
// A release force-activated past its gate (audited) boots with its bundle; any other refuses to.
const bundles = loadActiveBundles(policyRevisions(env), env.POLICY_DIR, {
  forced: await releaseForced(db, env.GATEHOUSE_RELEASE),
  onForced: (failures) =>
    log.error({ alert: 'forced_policy', failing: failures.length }, 'running a force-activated bundle that fails its gate'),
});
await registerRelease(db, release.id, release);
/**
 * Per release and pack: policy revision, catalog digest (fails at boot if a schema is not
 * strict-mode valid) and budgets. This process's own release takes the env overrides; a
 * candidate a cohort is routed to takes its manifest's values.
 */
const packSettings = (releaseId: string, pack: Pack) => {
  const own = releaseId === release.id;
  const m = own ? release : loadReleaseManifest(releaseId);
  return {
    policyRevision: own ? bundles[pack].revision : m.policy[pack],
    catalogDigest: catalogDigest(toolsOfPack(pack)),
    budgets: {
      maxRounds: (own ? env.MAX_ROUNDS : undefined) ?? m.budgets[pack].maxRounds,
      maxToolCalls: (own ? env.MAX_TOOL_CALLS : undefined) ?? m.budgets[pack].maxToolCalls,
      wallTimeSeconds: (own ? env.WALL_TIME_SECONDS : undefined) ?? m.budgets[pack].wallTimeSeconds,
      maxSpendMicroUsd: (own ? env.MAX_SPEND_MICRO_USD : undefined) ?? m.budgets[pack].maxSpendMicroUsd,
    },
  };
};
packSettings(release.id, 'support');
packSettings(release.id, 'change');
const baseURL = env.MODEL_BASE_URL ?? (process.env.OPENAI_API_KEY ? undefined : LOCAL_MODEL_STUB_URL);
const model = createModelClient({ apiKey: env.OPENAI_API_KEY, baseURL, timeoutMs: env.MODEL_TIMEOUT_MS });

const verifier = userTokenVerifier(env);
const app = createHttpApp('agent-loop', ctx.readyChecks);
app.use('/v1', requireUser(verifier));
app.use(
  ticketsRouter({
    db,
    relay,
    release: env.GATEHOUSE_RELEASE,
    auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
    packs: (releaseId: string) => ({ support: packSettings(releaseId, 'support'), change: packSettings(releaseId, 'change') }),
  }),
);
app.use(workflowsRouter({ db, relay }));
finishApp(app, log);

const workers = startWorkers(
  [
    {
      contract: turnsQueue,
      handler: (p: TurnJob) =>
        processTurn(p, { db, relay, log, model, modelName: env.MODEL_NAME ?? release.model.name, modelPrice: release.model, hooks }),
    },
    { contract: resultsQueue, handler: (p: ResultJob) => processResult(p, { db, relay }) },
  ] as never,
  {
    release: env.GATEHOUSE_RELEASE,
    prefix: env.QUEUE_PREFIX,
    redisUrl: env.REDIS_URL,
    log,
    lockDurationMs: env.AGENT_LOOP_LOCK_MS,
    stalledIntervalMs: env.AGENT_LOOP_STALLED_INTERVAL_MS,
  },
);
relay.start();
const { server, port } = await listen(app, env.AGENT_LOOP_PORT);
log.info({ port, release: env.GATEHOUSE_RELEASE }, 'agent-loop ready');
installShutdown(log, [() => ctx.close(workers), () => closeServer(server)]);
