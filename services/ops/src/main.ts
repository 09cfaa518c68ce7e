import {
  createServiceContext,
  createHttpApp,
  finishApp,
  listen,
  closeServer,
  installShutdown,
  userTokenVerifier,
} from '@gatehouse/platform';
import { opsEnv } from './env.ts';
import { operatorAuth } from './http/operator-auth.ts';
import { opsRouter } from './http/ops.router.ts';
import { createQueueBoard } from './http/queue-board.ts';

const ctx = createServiceContext('ops', opsEnv);
const { env, log, db, redis, queues } = ctx;

const board = createQueueBoard({ db, redis, queues, releasesDir: env.RELEASES_DIR, basePath: '/queues' });
// A failed first discovery (Redis not up yet) is retried by the timer; /readyz reports Redis.
await board
  .refresh()
  .then((found) => log.info({ queues: found.length }, 'queues discovered'))
  .catch((err: unknown) => log.warn({ err: (err as Error).message }, 'queue discovery failed'));
const discovery = setInterval(() => {
  board.refresh().catch((err: unknown) => log.warn({ err: (err as Error).message }, 'queue discovery failed'));
}, env.OPS_QUEUE_DISCOVERY_MS);

const { router: signIn, requireOperator } = operatorAuth({
  db,
  log,
  verifier: userTokenVerifier(env),
  auditHmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
  localSecret: env.GATEHOUSE_AUTH_JWKS_URL || env.GATEHOUSE_ENV === 'production' ? null : env.GATEHOUSE_AUTH_SECRET,
  secureCookie: env.GATEHOUSE_ENV === 'production',
});

const app = createHttpApp('ops', ctx.readyChecks);
app.use(signIn);
app.use('/queues', requireOperator, board.handler);
app.use(['/ops', '/api'], requireOperator);
app.use(opsRouter({ db, board }));
finishApp(app, log);

const { server, port } = await listen(app, env.OPS_PORT);
log.info({ port }, 'ops ready');
installShutdown(log, [() => ctx.close(), () => clearInterval(discovery), () => closeServer(server)]);
