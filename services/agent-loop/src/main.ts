import {
  assertReleaseMatchesCode,
  bootStep,
  createServiceContext,
  listen,
  closeServer,
  installShutdown,
  holdWhileUnavailable,
  startWorkers,
  userTokenVerifier,
  limiterFromEnv,
  webhookSecretKeyOf,
  webhookSecretKeyProblems,
  type QueueJob,
} from '@gatehouse/platform';
import { turnsQueue, resultsQueue, loadReleaseManifest, type TurnJob, type ResultJob } from '@gatehouse/contracts';
import { noteOutageWait, readOutagePolicy, registerRelease, stopRunOnFailedStep } from '@gatehouse/ledger';
import { catalogDigest, toolsOfPack, type Pack } from '@gatehouse/tools';
import { loadServiceBundles } from '@gatehouse/policy';
import { agentLoopEnv } from './env.ts';

import type { PackSettings } from './http/tickets.router.ts';
import { createIntakeApp } from './http/app.ts';
import { createModelClient, LOCAL_MODEL_STUB_URL } from './domain/model-client.ts';
import { processTurn } from './jobs/turns.processor.ts';
import { readLoopTestHooks } from './domain/test-hooks.ts';
import { readTenantSpendCap } from './domain/tenant-spend.ts';
import { processResult } from './jobs/results.processor.ts';
import { WorkflowEventHub } from './domain/event-hub.ts';
import { readWebhookTestHooks, WebhookDeliveryWorker } from './jobs/webhook-delivery.worker.ts';

// Production refuses the local key that seals webhook signing secrets (ADR 0550).
const ctx = createServiceContext('agent-loop', agentLoopEnv, process.env, (env) => webhookSecretKeyProblems(env));
const { env, log, db, relay } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);
const hooks = readLoopTestHooks(process.env);
const outagePolicy = readOutagePolicy(env.DEPENDENCY_WAIT_CEILING_MS, process.env);
const tenantCap = readTenantSpendCap(env.TENANT_DAILY_SPEND_MICRO_USD, process.env);
const release = loadReleaseManifest(env.GATEHOUSE_RELEASE);
// A release force-activated past its gate (audited) boots with its bundle; any other refuses to.
const bundles = await loadServiceBundles(db, env, log);
// Started during a Postgres outage, the process waits for it here rather than exit (and crash-loop).
await bootStep(log, 'register the release', () => registerRelease(db, release.id, release));
/** Catalog digest per pack, computed once at boot (fails here if a schema is not strict-mode valid). */
const catalogDigests: Record<Pack, string> = {
  support: catalogDigest(toolsOfPack('support')),
  change: catalogDigest(toolsOfPack('change')),
};
/**
 * Per release, both packs' policy revision, catalog digest and budgets, built once per release
 * (not per ticket). This process's own release takes the env overrides; a candidate a cohort is
 * routed to takes its manifest's values.
 */
const settingsByRelease = new Map<string, Record<Pack, PackSettings>>();
const packsFor = (releaseId: string): Record<Pack, PackSettings> => {
  let settings = settingsByRelease.get(releaseId);
  if (!settings) {
    const own = releaseId === release.id;
    const m = own ? release : loadReleaseManifest(releaseId);
    const of = (pack: Pack): PackSettings => ({
      policyRevision: own ? bundles[pack].revision : m.policy[pack],
      catalogDigest: catalogDigests[pack],
      budgets: {
        maxRounds: (own ? env.MAX_ROUNDS : undefined) ?? m.budgets[pack].maxRounds,
        maxToolCalls: (own ? env.MAX_TOOL_CALLS : undefined) ?? m.budgets[pack].maxToolCalls,
        wallTimeSeconds: (own ? env.WALL_TIME_SECONDS : undefined) ?? m.budgets[pack].wallTimeSeconds,
        maxSpendMicroUsd: (own ? env.MAX_SPEND_MICRO_USD : undefined) ?? m.budgets[pack].maxSpendMicroUsd,
      },
    });
    settings = { support: of('support'), change: of('change') };
    settingsByRelease.set(releaseId, settings);
  }
  return settings;
};
packsFor(release.id);
const baseURL = env.MODEL_BASE_URL ?? (process.env.OPENAI_API_KEY ? undefined : LOCAL_MODEL_STUB_URL);
const model = createModelClient({ apiKey: env.OPENAI_API_KEY, baseURL, timeoutMs: env.MODEL_TIMEOUT_MS });

// Pushed updates (docs/decisions/0250): streams hear every replica's transitions through Postgres.
const hub = new WorkflowEventHub(env.DATABASE_URL, log);
await hub.start();
const webhooks = new WebhookDeliveryWorker({
  db,
  log,
  pollMs: env.WEBHOOK_POLL_MS,
  maxAttempts: env.WEBHOOK_MAX_ATTEMPTS,
  maxAgeMs: env.WEBHOOK_MAX_AGE_MS,
  retryBaseMs: env.WEBHOOK_RETRY_BASE_MS,
  retryMaxMs: env.WEBHOOK_RETRY_MAX_MS,
  timeoutMs: env.WEBHOOK_TIMEOUT_MS,
  production: env.GATEHOUSE_ENV === 'production',
  hooks: readWebhookTestHooks(process.env),
  secretKey: webhookSecretKeyOf(env),
});
if (env.WEBHOOK_DELIVERY === 'on') webhooks.start();

const app = createIntakeApp({
  db,
  relay,
  release: env.GATEHOUSE_RELEASE,
  auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
  packs: packsFor,
  verifier: userTokenVerifier(env),
  limiter: limiterFromEnv(ctx.redis, env, 'intake'),
  log,
  readyChecks: ctx.readyChecks,
  responseDeadlineMs: env.HTTP_RESPONSE_DEADLINE_MS,
  events: {
    hub,
    pollMs: env.EVENTS_POLL_MS,
    heartbeatMs: env.EVENTS_HEARTBEAT_MS,
    limits: { perUser: env.EVENTS_MAX_STREAMS_PER_USER, perTenant: env.EVENTS_MAX_STREAMS_PER_TENANT },
  },
});

const workers = startWorkers(
  [
    {
      contract: turnsQueue,
      handler: (p: TurnJob, job: QueueJob) =>
        holdWhileUnavailable(
          job,
          log,
          () =>
            processTurn(p, {
              db,
              relay,
              log,
              model,
              modelName: env.MODEL_NAME ?? release.model.name,
              modelPrice: release.model,
              hooks,
              tenantCap,
              outagePolicy,
            }),
          (mark) => noteOutageWait(db, p.workflowId, mark, outagePolicy),
        ),
      onExhausted: (p: TurnJob) => stopRunOnFailedStep(db, p.workflowId, 'turns', 'agent-loop').then(() => {}),
    },
    {
      contract: resultsQueue,
      handler: (p: ResultJob, job: QueueJob) => holdWhileUnavailable(job, log, () => processResult(p, { db, relay, outagePolicy })),
      onExhausted: (p: ResultJob) => stopRunOnFailedStep(db, p.workflowId, 'results', 'agent-loop').then(() => {}),
    },
  ] as never,
  {
    release: env.GATEHOUSE_RELEASE,
    prefix: env.QUEUE_PREFIX,
    redisUrl: env.REDIS_URL,
    log,
    gate: ctx.gate,
    drain: ctx.drain,
    lockDurationMs: env.AGENT_LOOP_LOCK_MS,
    stalledIntervalMs: env.AGENT_LOOP_STALLED_INTERVAL_MS,
  },
);
relay.start();
const { server, port } = await listen(app, env.AGENT_LOOP_PORT);
log.info({ port, release: env.GATEHOUSE_RELEASE }, 'agent-loop ready');
installShutdown(log, [() => webhooks.stop(), () => hub.close(), () => ctx.close(workers), () => closeServer(server)]);
