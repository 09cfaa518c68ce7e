import {
  assertReleaseMatchesCode,
  bootStep,
  createServiceContext,
  listen,
  closeServer,
  installShutdown,
  userTokenVerifier,
  limiterFromEnv,
  webhookSecretKeyOf,
  resealWebhookSecrets,
  webhookSecretKeyProblems,
} from '@gatehouse/platform';
import { opsEnv } from './env.ts';
import { createOpsApp } from './http/app.ts';
import { createQueueBoard } from './http/queue-board.ts';

// Production refuses the local key that seals webhook signing secrets (ADR 0550).
const ctx = createServiceContext('ops', opsEnv, process.env, (env) => webhookSecretKeyProblems(env));
const { env, log, db, redis, queues } = ctx;
// The code must be the release it serves: a differing catalog, prompt or audit schema refuses to boot (ADR 0220).
await assertReleaseMatchesCode(ctx.name, env.GATEHOUSE_RELEASE, db, log);

// Completes a key rotation (ADR 0550): secrets sealed under a previous key, or stored in clear, are resealed.
const secretKey = webhookSecretKeyOf(env);
// Started during a Postgres outage, the process waits for it here rather than exit (and crash-loop).
const sealed = await bootStep(log, 'reseal webhook secrets', () => resealWebhookSecrets(db, secretKey));
if (sealed.resealed) log.info(sealed, 'webhook secrets resealed under the current key');
if (sealed.unreadable) log.warn(sealed, 'webhook secrets that no configured key opens: register those endpoints again');

const board = createQueueBoard({ db, redis, queues, releasesDir: env.RELEASES_DIR, basePath: '/queues', log });
// Discovery waits for Redis a bounded time at most (its Redis part is skipped while Redis is down
// or silent and retried by the timer), so the service listens — /healthz, /readyz, the ledger's
// pages — whether Redis is up or not; /readyz reports Redis.
await board
  .refresh()
  .then((found) => log.info({ queues: found.length }, 'queues discovered'))
  .catch((err: unknown) => log.warn({ err: (err as Error).message }, 'queue discovery failed'));
const discovery = setInterval(() => {
  board.refresh().catch((err: unknown) => log.warn({ err: (err as Error).message }, 'queue discovery failed'));
}, env.OPS_QUEUE_DISCOVERY_MS);

const app = createOpsApp({
  webhookSecretKey: secretKey,
  db,
  log,
  board,
  verifier: userTokenVerifier(env),
  auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
  localSecret: env.GATEHOUSE_AUTH_JWKS_URL || env.GATEHOUSE_ENV === 'production' ? null : env.GATEHOUSE_AUTH_SECRET,
  secureCookie: env.GATEHOUSE_ENV === 'production',
  production: env.GATEHOUSE_ENV === 'production',
  maxWebhooksPerTenant: env.WEBHOOK_MAX_ENDPOINTS_PER_TENANT,
  signInLimiter: limiterFromEnv(ctx.redis, env, 'signin'),
  readyChecks: ctx.readyChecks,
  responseDeadlineMs: env.HTTP_RESPONSE_DEADLINE_MS,
  databaseUrl: env.DATABASE_URL,
  redisUrl: env.REDIS_URL,
});

const { server, port } = await listen(app, env.OPS_PORT);
log.info({ port }, 'ops ready');
installShutdown(log, [() => ctx.close(), () => clearInterval(discovery), () => closeServer(server)]);
