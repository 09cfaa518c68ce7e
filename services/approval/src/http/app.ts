import type { Express } from 'express';
import { approvalOpenApi } from '@gatehouse/contracts';
import {
  createHttpApp,
  finishApp,
  refuseUnknownQuery,
  requireUser,
  RESPONSE_DEADLINE_MS,
  responseDeadline,
  setPageHeaders,
  type Logger,
  type ReadyCheck,
  withRevocations,
} from '@gatehouse/platform';
import { approvalsRouter } from './approvals.router.ts';
import { inboxRouter, type InboxConfig } from './inbox.router.ts';
import { inboxUnanswered } from './inbox.html.ts';

/** Inputs of {@link createApprovalApp}: the inbox's settings (which include the API's) plus the logger. */
export interface ApprovalAppOptions extends InboxConfig {
  log: Logger;
  /** `/readyz` checks (Postgres, Redis). */
  readyChecks?: Record<string, ReadyCheck>;
  /** How long an API request or an inbox page may go unanswered before 503, ms (default {@link RESPONSE_DEADLINE_MS}). */
  responseDeadlineMs?: number;
}

/**
 * Builds the approval service's HTTP surface as one express app: `/openapi.json`, the approver
 * inbox (`/inbox…`, cookie sessions), the approval API under `/v1` behind a verified bearer token,
 * `/healthz`, `/readyz` and the shared 404 and error handlers. The caller listens (`listen`,
 * supertest) and owns `db` and `relay`.
 */
export function createApprovalApp(opts: ApprovalAppOptions): Express {
  const { log, readyChecks, responseDeadlineMs, ...options } = opts;
  // The inbox and the API refuse a revoked token (ADR 0695); a decision checks again in its transaction.
  const inbox = { ...options, verifier: withRevocations(options.verifier, options.db) };
  const app = createHttpApp('approval', readyChecks);
  const openApi = approvalOpenApi();
  app.get('/openapi.json', (_req, res) => {
    res.json(openApi);
  });
  app.get('/', (_req, res) => res.redirect(303, '/inbox'));
  const ms = responseDeadlineMs ?? RESPONSE_DEADLINE_MS;
  // The inbox's pages are bounded as the API is: a hung ledger never holds an approver's browser.
  app.use(
    '/inbox',
    responseDeadline(ms, (_req, res) => {
      setPageHeaders(res);
      res.type('html').send(inboxUnanswered(ms));
    }),
  );
  app.use(inboxRouter(inbox));
  app.use('/v1', responseDeadline(ms), requireUser(inbox.verifier));
  // A query parameter the operation does not document is 400, before any ledger read (ADR 0688).
  app.use(refuseUnknownQuery(openApi));
  app.use(approvalsRouter({ db: inbox.db, relay: inbox.relay, auditHmacKey: inbox.auditHmacKey }));
  return finishApp(app, log);
}
