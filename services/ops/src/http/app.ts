import type { Express, NextFunction, Request, Response } from 'express';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { opsOpenApi } from '@gatehouse/contracts';
import {
  createHttpApp,
  dependencyCheckHint,
  errorResponseOf,
  finishApp,
  localWebhookSecretKey,
  refuseUnknownQuery,
  RESPONSE_DEADLINE_MS,
  responseDeadline,
  setPageHeaders,
  type ReadyCheck,
  type WebhookSecretKey,
} from '@gatehouse/platform';
import { operatorAuth, wantsJson, type OperatorAuthConfig } from './operator-auth.ts';
import { tokenRevocationsRouter } from './token-revocations.router.ts';
import { opsRouter } from './ops.router.ts';
import { DEFAULT_MAX_WEBHOOKS_PER_TENANT, webhooksRouter } from './webhooks.router.ts';
import type { QueueBoard } from './queue-board.ts';
import { unansweredPage, unreachablePage } from './pages.html.ts';

/** Inputs of {@link createOpsApp}: the sign-in's settings plus the queue board. */
export interface OpsAppOptions extends OperatorAuthConfig {
  board: QueueBoard;
  /** Production: webhook URLs must be https. */
  production?: boolean;
  /** Active webhook endpoints per tenant (default {@link DEFAULT_MAX_WEBHOOKS_PER_TENANT}; `WEBHOOK_MAX_ENDPOINTS_PER_TENANT`). */
  maxWebhooksPerTenant?: number;
  /** Seals webhook signing secrets at rest (default: the local key; ADR 0550). */
  webhookSecretKey?: WebhookSecretKey;
  /** `/readyz` checks (Postgres, Redis). */
  readyChecks?: Record<string, ReadyCheck>;
  /** How long a page or an `/api` request may go unanswered before 503, ms (default {@link RESPONSE_DEADLINE_MS}; `HTTP_RESPONSE_DEADLINE_MS`). */
  responseDeadlineMs?: number;
  /** The ledger's URL (`DATABASE_URL`): its host and port name what to check on an outage page. */
  databaseUrl?: string;
  /** Redis's URL (`REDIS_URL`), likewise. */
  redisUrl?: string;
}

/**
 * Builds the ops dashboard as one express app: sign-in (`/signin`, `/session`, `/signout`), the
 * queue board under `/queues`, the pages (`/ops`) and `/api/*` (webhook endpoints and deliveries included), all but sign-in behind the
 * operator check, plus the JSON API's `/openapi.json` (unauthenticated), `/healthz`, `/readyz` and the shared 404 and error handlers. The caller
 * listens and owns `db` and the board (its discovery timer).
 */
export function createOpsApp(opts: OpsAppOptions): Express {
  const {
    board,
    readyChecks,
    production = false,
    maxWebhooksPerTenant = DEFAULT_MAX_WEBHOOKS_PER_TENANT,
    webhookSecretKey = localWebhookSecretKey(),
    responseDeadlineMs = RESPONSE_DEADLINE_MS,
    databaseUrl = 'postgres://127.0.0.1:5432/',
    redisUrl = 'redis://127.0.0.1:6379',
    ...auth
  } = opts;
  const { router: signIn, requireOperator } = operatorAuth(auth);
  const app = createHttpApp('ops', readyChecks);
  const openApi = opsOpenApi();
  app.get('/openapi.json', (_req, res) => {
    res.json(openApi);
  });
  // A hung ledger never holds on-call: pages answer a 503 page, `/api` a 503 JSON error (bull-board's own API has its bound, ADR 0651).
  app.use(
    '/ops',
    responseDeadline(responseDeadlineMs, (_req, res) => {
      setPageHeaders(res);
      res.type('html').send(unansweredPage(responseDeadlineMs));
    }),
  );
  app.use('/api', responseDeadline(responseDeadlineMs));
  app.use(signIn);
  app.use('/queues', requireOperator, board.handler);
  app.use(['/ops', '/api'], requireOperator);
  // A query parameter an `/api` operation does not document is 400, before any ledger read (ADR 0688; pages are not checked).
  app.use(refuseUnknownQuery(openApi));
  app.use(opsRouter({ db: auth.db, board }));
  app.use(
    webhooksRouter({
      db: auth.db,
      auditHmacKey: auth.auditHmacKey,
      production,
      maxPerTenant: maxWebhooksPerTenant,
      secretKey: webhookSecretKey,
    }),
  );
  app.use(tokenRevocationsRouter({ db: auth.db, auditHmacKey: auth.auditHmacKey }));
  app.use(outagePage({ postgres: databaseUrl, redis: redisUrl }));
  return finishApp(app, auth.log);
}

/**
 * The error answer of a page (not `/api`: {@link wantsJson}) whose dependency is unavailable (a
 * 503 of the shared error mapping, e.g. Postgres refusing connections): an HTML 503 page naming
 * what is unreachable and what to check, with the API's `Retry-After`. Every other error, and
 * every `/api` one, goes on to the shared JSON handler (docs/decisions/0060, amended).
 */
function outagePage(urls: { postgres: string; redis: string }) {
  return (err: unknown, req: Request, res: Response, next: NextFunction): void => {
    const answer = errorResponseOf(err);
    if (res.headersSent || wantsJson(req) || answer?.status !== 503) return next(err);
    // A connection fault that names no dependency comes from the ledger: the pages read nothing else unbounded (ADR 0651).
    const dependency = err instanceof DependencyUnavailable && err.dependency === 'redis' ? 'redis' : 'postgres';
    for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
    setPageHeaders(res);
    res
      .status(503)
      .type('html')
      .send(unreachablePage(dependency === 'redis' ? 'Redis' : 'Postgres', dependencyCheckHint(dependency, urls[dependency])));
  };
}
