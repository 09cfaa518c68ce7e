import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import { STATUS_CODES, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { ZodType } from 'zod';
import { UserError } from './errors.ts';
import { errorResponseOf } from './http-errors.ts';
import type { Logger } from './logger.ts';
import { within } from './timeout.ts';
import { refuseDuplicateJsonKeys } from './json-body.ts';

/** A readiness probe: resolves when a dependency answers, rejects otherwise. */
export type ReadyCheck = () => Promise<void>;

/** How long one readiness check may take before it counts as failing (ms). */
export const READY_CHECK_TIMEOUT_MS = 2000;

/**
 * Creates an express app with JSON parsing (1 MiB; an object naming a key twice is 400
 * `invalid_body`, docs/decisions/0687), `GET /healthz` (process alive) and
 * `GET /readyz` (every check passes within {@link READY_CHECK_TIMEOUT_MS}: 200 `{ready:true}`,
 * else 503 with the failing checks — a dependency that hangs fails, it never holds the probe).
 * Call {@link finishApp} after adding routes to install the 404 and error handlers.
 */
export function createHttpApp(service: string, checks: Record<string, ReadyCheck> = {}): Express {
  const app = express();
  app.disable('x-powered-by');
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
    if (Object.keys(failing).length) res.status(503).json({ ready: false, service, failing });
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
 * Installs the 404 handler and the one error middleware of every HTTP service: the answer comes
 * from {@link errorResponseOf} — a malformed request its 4xx, an error of the tree (contracts'
 * `GatehouseError`) its status by class with `{error: {reason, message}}`, an unreachable
 * dependency 503 `dependency_unavailable` with `Retry-After: 5` (seconds), each logged at warn
 * when 5xx; anything else is logged as `unhandled error` and answered 500 without internals.
 */
export function finishApp(app: Express, log: Logger): Express {
  app.use((req, res) => {
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

/** HTTP status of a request the parser refused, by Node's error code (else 400). */
const CLIENT_ERROR_STATUS: Record<string, number> = {
  HPE_HEADER_OVERFLOW: 431,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/**
 * Answers a request Node's HTTP parser refused before express saw it (bytes past a short
 * `Content-Length`, a malformed request line or header, a header section too large) with the
 * same `{error: {reason, message}}` body as every other 4xx, instead of Node's empty default
 * (the status line alone for a HEAD request and for a head section too large),
 * then closes the connection (its framing is lost). When a request before the refused bytes is
 * still being answered, its answer is written first. A socket already reset is only destroyed.
 * Reason `malformed_request` (431 `headers_too_large`, 408 `request_timeout`).
 */
export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  // Pipelined bytes: the request before them was read whole and is still being answered. Its
  // answer goes first. (A request whose own body broke the framing is never complete: no answer
  // of its own is coming, so the refusal is written now.)
  const pending = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
  if (pending && !pending.writableFinished && pending.req.complete) {
    pending.once('finish', () => (socket.writable ? writeClientError(err, socket) : socket.destroy()));
    pending.once('close', () => socket.writable && !pending.writableFinished && socket.destroy());
    return;
  }
  writeClientError(err, socket);
}

/** Writes {@link answerClientError}'s answer for `err` on `socket` and closes it. */
function writeClientError(err: Error & { code?: string }, socket: Socket): void {
  const status = CLIENT_ERROR_STATUS[err.code ?? ''] ?? 400;
  const reason = status === 431 ? 'headers_too_large' : status === 408 ? 'request_timeout' : 'malformed_request';
  // A HEAD request's answer has no body (its client would read one as the next response), and a
  // head section too large may not show its method: those get the status line alone.
  const head = (err as { rawPacket?: Buffer }).rawPacket?.toString('latin1', 0, 5);
  const body =
    status === 431 || head === undefined || head === 'HEAD '
      ? ''
      : JSON.stringify({
          error: {
            reason,
            message: `the request could not be parsed as HTTP/1.1 (${err.code ?? 'parse error'}); check Content-Length and framing`,
          },
        });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${body ? 'content-type: application/json; charset=utf-8\r\n' : ''}` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * Listens on `port` (0 = ephemeral) at `host` (default `GATEHOUSE_BIND_HOST`, else loopback only;
 * containers set `0.0.0.0`); resolves with the server and its bound port. A request the HTTP
 * parser refuses is answered by {@link answerClientError}.
 */
export async function listen(
  app: Express,
  port: number,
  host = process.env.GATEHOUSE_BIND_HOST ?? '127.0.0.1',
): Promise<{ server: Server; port: number }> {
  return new Promise((resolve, reject) => {
    const server = app.listen(port, host, (err?: Error) => {
      if (err) reject(err);
      else resolve({ server, port: (server.address() as AddressInfo).port });
    });
    server.on('clientError', answerClientError);
  });
}

/** Closes a server, waiting for in-flight requests (keep-alive sockets are closed). */
export async function closeServer(server: Server): Promise<void> {
  server.closeIdleConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
