import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { ZodType } from 'zod';
import { UserError } from './errors.ts';
import { errorResponseOf } from './http-errors.ts';
import type { Logger } from './logger.ts';
import { within } from './timeout.ts';
import { refuseDuplicateJsonKeys, refuseUnlistedContentEncoding } from './json-body.ts';
import { allowedMethods } from './allowed-methods.ts';

/** A readiness probe: resolves when a dependency answers, rejects otherwise. */
export type ReadyCheck = () => Promise<void>;

/** The mark {@link needsOperator} puts on a readiness check. */
const OPERATOR_CHECK = Symbol('gatehouse.readyCheck.needsOperator');

/**
 * Marks `check` as one whose failure does not clear by itself — no dependency coming back ends
 * it; an operator must act (a configuration to change, a command to run; the check's message
 * names it). `/readyz` lists such failing checks in `needsOperator`, and `gatehouse stack up`
 * stops waiting for the service when one fails (docs/decisions/0729). Returns `check`.
 */
export function needsOperator(check: ReadyCheck): ReadyCheck {
  return Object.assign(check, { [OPERATOR_CHECK]: true });
}

/** Whether {@link needsOperator} marked `check`. */
function isOperatorCheck(check: ReadyCheck): boolean {
  return (check as ReadyCheck & { [OPERATOR_CHECK]?: boolean })[OPERATOR_CHECK] === true;
}

/** How long one readiness check may take before it counts as failing (ms). */
export const READY_CHECK_TIMEOUT_MS = 2000;

/**
 * Creates an express app with JSON parsing (1 MiB; an object naming a key twice is 400
 * `invalid_body`, docs/decisions/0687; a body in a coding other than identity, gzip, deflate or br
 * is 415 `unsupported_encoding`, docs/decisions/0781), `GET /healthz` (process alive) and
 * `GET /readyz` (every check passes within {@link READY_CHECK_TIMEOUT_MS}: 200 `{ready:true}`,
 * else 503 with the failing checks, check → message, and, when any, `needsOperator`: those of
 * them marked {@link needsOperator} — a dependency that hangs fails, it never holds the probe).
 * Call {@link finishApp} after adding routes to install the 404 and error handlers.
 */
export function createHttpApp(service: string, checks: Record<string, ReadyCheck> = {}): Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(refuseUnlistedContentEncoding);
  app.use(express.json({ limit: '1mb', verify: refuseDuplicateJsonKeys }));
  app.get('/healthz', (_req, res) => {
    res.json({ ok: true, service });
  });
  app.get('/readyz', async (_req, res) => {
    const failing: Record<string, string> = {};
    await Promise.all(
      Object.entries(checks).map(async ([name, check]) => {
        try {
          await within(check(), READY_CHECK_TIMEOUT_MS);
        } catch (err) {
          failing[name] = err instanceof Error ? err.message : String(err);
        }
      }),
    );
    // Failing checks that will not pass again without an operator: a waiting caller may stop waiting.
    const operator = Object.keys(failing).filter((name) => isOperatorCheck(checks[name]!));
    if (Object.keys(failing).length)
      res.status(503).json({ ready: false, service, failing, ...(operator.length ? { needsOperator: operator } : {}) });
    else res.json({ ready: true, service });
  });
  return app;
}

/** Default of `HTTP_RESPONSE_DEADLINE_MS`: how long an API request may go unanswered, ms. */
export const RESPONSE_DEADLINE_MS = 10_000;

/**
 * Express middleware: a request with no answer after `ms` milliseconds gets 503
 * `dependency_unavailable` with `Retry-After: 5` (seconds) — a Postgres or Redis that hangs
 * rather than refuses must not hold the caller. The handler goes on; what it answers later is
 * dropped (the error middleware leaves a sent response alone). The request may still complete:
 * a retried ticket returns the same workflow (idempotent per ticket id), a retried approval
 * decision finds it decided; a retried follow-up message is added once when it carries an
 * `Idempotency-Key` (docs/decisions/0510), and again without one, as after any client-side
 * timeout. A stream (Server-Sent Events) is bounded until it opens: once its headers are sent the
 * deadline does nothing, and the stream's handler must check `res.headersSent` after its own waits
 * (docs/decisions/0688-every-bearer-token-expires.md). `answer` (optional) sends the 503's body
 * instead of the JSON error (status 503 and `Retry-After` already set): an HTML page for a browser.
 */
export function responseDeadline(ms: number, answer?: (req: Request, res: Response) => void) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const timer = setTimeout(() => {
      if (res.headersSent) return;
      res.setHeader('retry-after', '5');
      res.status(503);
      // A page of a browser surface (inbox, dashboard) answers its own HTML; the APIs answer JSON.
      if (answer) return void answer(req, res);
      res.json({
        error: {
          reason: 'dependency_unavailable',
          message: `no answer within ${ms} ms: the ledger or the queue is not answering; retry later (the request may still complete)`,
        },
      });
    }, ms);
    res.on('close', () => clearTimeout(timer));
    next();
  };
}

/**
 * Installs the 405/404 handler and the one error middleware of every HTTP service. A request no
 * route answered whose path a route of another method takes is 405 `method_not_allowed` with
 * `Allow` naming the path's methods (RFC 9110 §15.5.6, docs/decisions/0746); any other is 404
 * `not_found`. The error middleware's answer comes
 * from {@link errorResponseOf} — a malformed request its 4xx, an error of the tree (contracts'
 * `GatehouseError`) its status by class with `{error: {reason, message}}`, an unreachable
 * dependency 503 `dependency_unavailable` with `Retry-After: 5` (seconds), each logged at warn
 * when 5xx; anything else is logged as `unhandled error` and answered 500 without internals.
 */
export function finishApp(app: Express, log: Logger): Express {
  app.use((req, res) => {
    const allow = allowedMethods(app, req.path);
    if (allow.length && !allow.includes(req.method)) {
      res.setHeader('allow', allow.join(', '));
      const message = `${req.path} does not take ${req.method}: it takes ${allow.join(', ')}`;
      return void res.status(405).json({ error: { reason: 'method_not_allowed', message } });
    }
    res.status(404).json({ error: { reason: 'not_found', message: `no route ${req.method} ${req.path}` } });
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    // Already answered (a response deadline passed): the late outcome has nowhere to go.
    if (res.headersSent) return void log.warn({ err: (err as Error).message }, 'late outcome after the response was sent');
    const answer = errorResponseOf(err);
    if (!answer) {
      log.error({ err }, 'unhandled error');
      res.status(500).json({ error: { reason: 'internal', message: 'internal error' } });
      return;
    }
    const { reason } = answer.body.error;
    if (answer.status >= 500)
      log.warn({ err: (err as Error).message, reason }, reason === 'dependency_unavailable' ? 'dependency unavailable' : 'request failed');
    for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
    res.status(answer.status).json(answer.body);
  });
  return app;
}

/**
 * Parses a request part with a zod schema.
 * @throws UserError(`invalid_body`, 400) listing every issue.
 */
export function parseBody<T>(schema: ZodType<T>, value: unknown): T {
  if (value === undefined) throw new UserError('invalid_body', 'a JSON body is required (content-type: application/json)');
  const r = schema.safeParse(value);
  if (!r.success) {
    throw new UserError('invalid_body', 'request body failed validation', {
      details: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  }
  return r.data;
}
