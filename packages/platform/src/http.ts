import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ZodType } from 'zod';
import { httpStatusOf, GatehouseError, UserError, type UserError as UE } from './errors.ts';
import type { Logger } from './logger.ts';
import { within } from './timeout.ts';
import { IllegalTransition, isConnectionFault } from '@gatehouse/ledger';

/** A readiness probe: resolves when a dependency answers, rejects otherwise. */
export type ReadyCheck = () => Promise<void>;

/** How long one readiness check may take before it counts as failing (ms). */
export const READY_CHECK_TIMEOUT_MS = 2000;

/**
 * Creates an express app with JSON parsing (1 MiB), `GET /healthz` (process alive) and
 * `GET /readyz` (every check passes within {@link READY_CHECK_TIMEOUT_MS}: 200 `{ready:true}`,
 * else 503 with the failing checks — a dependency that hangs fails, it never holds the probe).
 * Call {@link finishApp} after adding routes to install the 404 and error handlers.
 */
export function createHttpApp(service: string, checks: Record<string, ReadyCheck> = {}): Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(express.json({ limit: '1mb' }));
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

/** An error of the request itself, answered 4xx: its status, reason and message. */
interface ClientFault {
  status: number;
  reason: string;
  message: string;
}

/** body-parser's error types (its `type` field) that describe the request body, with our reason and words. */
const BODY_FAULTS: Record<string, { reason: string; message: string }> = {
  'entity.parse.failed': { reason: 'invalid_body', message: 'body must be one JSON object' },
  'entity.too.large': { reason: 'body_too_large', message: 'body is too large' },
  'parameters.too.many': { reason: 'body_too_large', message: 'the form has too many fields' },
  'encoding.unsupported': { reason: 'unsupported_encoding', message: 'content-encoding must be identity, gzip, deflate or br' },
  'charset.unsupported': { reason: 'unsupported_charset', message: 'the body charset is not supported; send utf-8' },
  'request.aborted': { reason: 'invalid_body', message: 'the request body was aborted' },
  'request.size.invalid': { reason: 'invalid_body', message: 'the body length does not match content-length' },
};

/** Reasons of a 4xx error from express's own libraries (http-errors: serve-static, raw-body) by status. */
const STATUS_REASONS: Record<number, string> = {
  404: 'not_found',
  405: 'method_not_allowed',
  413: 'body_too_large',
  415: 'unsupported_media_type',
  416: 'range_not_satisfiable',
};

/**
 * The 4xx a request-level failure deserves, or null when the error is not the caller's:
 * - a path whose percent-encoding does not decode (the router's `decodeURIComponent` throws
 *   `URIError` while matching `:params`): 400 `bad_path`;
 * - a body-parser failure (it sets `type`): its own 4xx status with a reason from {@link BODY_FAULTS};
 * - a body that does not inflate with its `content-encoding` (zlib's `Z_*` codes): 400 `invalid_body`;
 * - any other 4xx error that express's libraries mark safe to show (http-errors' `expose: true`):
 *   its status, a reason from {@link STATUS_REASONS} (else `bad_request`) and its message.
 */
function clientFaultOf(err: unknown): ClientFault | null {
  if (err instanceof URIError) {
    return { status: 400, reason: 'bad_path', message: 'the request path has malformed percent-encoding' };
  }
  const e = err as { status?: unknown; type?: unknown; expose?: unknown; code?: unknown; message?: unknown } | null;
  if (!e || typeof e !== 'object' || typeof e.status !== 'number' || e.status < 400 || e.status >= 500) return null;
  if (typeof e.type === 'string') {
    const known = BODY_FAULTS[e.type];
    return { status: e.status, reason: known?.reason ?? 'invalid_body', message: known?.message ?? String(e.message) };
  }
  if (e.expose !== true) return null;
  if (typeof e.code === 'string' && e.code.startsWith('Z_')) {
    return { status: 400, reason: 'invalid_body', message: 'the body does not decode with its content-encoding' };
  }
  return { status: e.status, reason: STATUS_REASONS[e.status] ?? 'bad_request', message: String(e.message) };
}

/**
 * Installs the 404 handler and the error middleware: errors of the {@link GatehouseError} tree
 * become `{error: {reason, message}}` with their status; a malformed request (undecodable path,
 * body-parser failure) becomes its 4xx (see {@link clientFaultOf}); a move the transition table
 * refuses (`IllegalTransition`, nothing written) becomes 409 `illegal_transition`; an unreachable dependency
 * becomes 503 `dependency_unavailable` with `Retry-After: 5` (seconds); anything else is logged
 * and answered 500 without internals.
 */
export function finishApp(app: Express, log: Logger): Express {
  app.use((req, res) => {
    res.status(404).json({ error: { reason: 'not_found', message: `no route ${req.method} ${req.path}` } });
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const fault = clientFaultOf(err);
    if (fault) {
      res.status(fault.status).json({ error: { reason: fault.reason, message: fault.message } });
      return;
    }
    const status = httpStatusOf(err);
    if (err instanceof GatehouseError) {
      const body: Record<string, unknown> = { reason: err.reason, message: err.message };
      if (err instanceof UserError && err.details !== undefined) body.details = err.details;
      res.status(status).json({ error: body });
      return;
    }
    if (err instanceof IllegalTransition) {
      // The request asked for a move the transition table refuses; nothing was written.
      res.status(409).json({ error: { reason: 'illegal_transition', message: `${err.entity} is ${err.from}; cannot move to ${err.to}` } });
      return;
    }
    if (isConnectionFault(err)) {
      log.warn({ err: (err as Error).message }, 'dependency unavailable');
      res.setHeader('retry-after', '5');
      res.status(503).json({ error: { reason: 'dependency_unavailable', message: 'a dependency is unavailable; retry shortly' } });
      return;
    }
    log.error({ err }, 'unhandled error');
    res.status(500).json({ error: { reason: 'internal', message: 'internal error' } });
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
    }) as UE;
  }
  return r.data;
}

/**
 * Listens on `port` (0 = ephemeral) at `host` (default `GATEHOUSE_BIND_HOST`, else loopback only;
 * containers set `0.0.0.0`); resolves with the server and its bound port.
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
  });
}

/** Closes a server, waiting for in-flight requests (keep-alive sockets are closed). */
export async function closeServer(server: Server): Promise<void> {
  server.closeIdleConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
