import type { Express } from 'express';
import type { Request } from 'express';
import { intakeOpenApi } from '@gatehouse/contracts';
import type { UserClaims } from '@gatehouse/credentials';
import {
  createHttpApp,
  finishApp,
  rateLimit,
  refuseUnknownQuery,
  requireUser,
  RESPONSE_DEADLINE_MS,
  responseDeadline,
  type AbuseLimiter,
  type BearerVerifier,
  type Logger,
  type ReadyCheck,
  withRevocations,
} from '@gatehouse/platform';
import { ticketsRouter, type IntakeConfig } from './tickets.router.ts';
import { workflowsRouter } from './workflows.router.ts';
import { eventsRouter, type EventStreamConfig } from './events.router.ts';

/** Inputs of {@link createIntakeApp}: the intake's settings plus how callers are verified and logged. */
export interface IntakeAppOptions extends IntakeConfig {
  verifier: BearerVerifier;
  log: Logger;
  /** `/readyz` checks (Postgres, Redis). */
  readyChecks?: Record<string, ReadyCheck>;
  /** Per-user and per-tenant limits of `POST /v1/tickets` and `POST /v1/workflows/:id/messages` (the process always passes one). */
  limiter?: AbuseLimiter;
  /** Event streams (`GET /v1/workflows/:id/events`); absent: the route is not served. */
  events?: Omit<EventStreamConfig, 'db' | 'log' | 'revocations'>;
  /** How long a request (a stream: until it opens) may go unanswered before 503, ms (default {@link RESPONSE_DEADLINE_MS}). */
  responseDeadlineMs?: number;
}

/**
 * Builds the agent-loop's intake API as one express app: `POST /v1/tickets`,
 * `GET /v1/workflows/:id`, `GET /v1/workflows/:id/events` (SSE), `POST /v1/workflows/:id/messages`, every `/v1` route behind a verified
 * bearer token, plus `/openapi.json` (generated from packages/contracts/src/api/intake.ts), `/healthz`, `/readyz` and the shared 404 and error handlers. The caller
 * listens (`listen`, supertest) and owns `db` and `relay`.
 */
export function createIntakeApp(opts: IntakeAppOptions): Express {
  const { log, readyChecks, limiter, events, responseDeadlineMs, ...intake } = opts;
  // A revoked token is refused on every route, and ends the open streams (ADR 0695).
  const verifier = withRevocations(opts.verifier, intake.db);
  const app = createHttpApp('agent-loop', readyChecks);
  const openApi = intakeOpenApi();
  app.get('/openapi.json', (_req, res) => {
    res.json(openApi);
  });
  // A hanging ledger or queue answers 503, never holds the caller. The event stream is long-lived
  // by design, but bounded like the rest until it opens (its headers sent; ADR 0688).
  const deadline = responseDeadline(responseDeadlineMs ?? RESPONSE_DEADLINE_MS);
  app.post(['/v1/tickets', '/v1/workflows/:id/messages'], deadline);
  app.get(['/v1/workflows/:id', '/v1/workflows/:id/events'], deadline);
  app.use('/v1', requireUser(verifier));
  // A query parameter the operation does not document is 400, before any ledger read (ADR 0688).
  app.use(refuseUnknownQuery(openApi));
  if (limiter) {
    const subject = (req: Request) => {
      const user = (req as unknown as { user: UserClaims }).user;
      return { user: user.sub, tenant: user.tenant };
    };
    app.post(['/v1/tickets', '/v1/workflows/:id/messages'], rateLimit(limiter, subject));
  }
  app.use(ticketsRouter(intake));
  if (events) app.use(eventsRouter({ ...events, db: intake.db, log, revocations: verifier.revocations }));
  app.use(workflowsRouter({ db: intake.db, relay: intake.relay }));
  return finishApp(app, log);
}
