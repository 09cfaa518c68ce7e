import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Express } from 'express';
import { z } from 'zod';

/** Default of `HTTP_REQUEST_READ_TIMEOUT_MS`: how long reading one request (head and body) may take, ms. */
export const REQUEST_READ_TIMEOUT_MS = 5_000;

/**
 * The setting of every HTTP service's read bound (part of the base environment, `parseEnv`):
 * `HTTP_REQUEST_READ_TIMEOUT_MS`, ms, default {@link REQUEST_READ_TIMEOUT_MS}. A request whose
 * head and body are not both read within it is answered 408 `request_timeout` and its connection
 * closed (docs/decisions/0690-http-edges-answer-in-json-and-bound-the-read.md).
 */
export const requestReadTimeoutEnv = {
  HTTP_REQUEST_READ_TIMEOUT_MS: z.coerce.number().int().positive().default(REQUEST_READ_TIMEOUT_MS),
};

/** Reasons of the refusals {@link answerClientError} writes, by HTTP status (else `malformed_request`). */
const REASONS: Record<number, { reason: string; message: (code: string) => string }> = {
  431: {
    reason: 'headers_too_large',
    message: () => 'the request head (request line and headers) is larger than this server reads (16 KiB); send fewer or shorter headers',
  },
  408: {
    reason: 'request_timeout',
    message: () =>
      'the request (head and body) was not read whole within HTTP_REQUEST_READ_TIMEOUT_MS; send the whole request at once, then retry',
  },
  400: {
    reason: 'malformed_request',
    message: (code) => `the request could not be parsed as HTTP/1.1 (${code}); check Content-Length and framing`,
  },
};

/** HTTP status of a request the parser refused, by Node's error code (else 400). */
const CLIENT_ERROR_STATUS: Record<string, number> = {
  HPE_HEADER_OVERFLOW: 431,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/** The `{error: {reason, message}}` answer to a request Node's parser refused with `err`. */
function refusalOf(err: Error & { code?: string }): { status: number; body: string } {
  const status = CLIENT_ERROR_STATUS[err.code ?? ''] ?? 400;
  const { reason, message } = REASONS[status] ?? REASONS[400]!;
  return { status, body: JSON.stringify({ error: { reason, message: message(err.code ?? 'parse error') } }) };
}

/**
 * Answers a request Node's HTTP parser refused before express saw it (bytes past a short
 * `Content-Length`, a malformed request line or header, a head section too large, a request not
 * read whole within the read bound) with the same `{error: {reason, message}}` body as every other
 * 4xx, instead of Node's empty default, then closes the connection (its framing is lost). Reasons:
 * 400 `malformed_request`, 431 `headers_too_large`, 408 `request_timeout`.
 * - A request before the refused bytes that was read whole and is still being answered: its
 *   answer is written first.
 * - A request whose head was read but whose body was not (408): answered through its own response
 *   (a HEAD request gets no body), or, when that response has already begun, only closed.
 * - A socket already reset is only destroyed.
 */
export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const pending = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
  if (pending && !pending.writableFinished && pending.req.complete) {
    // Pipelined bytes: the request before them was read whole and is still being answered. Its
    // answer goes first. (A request whose own body broke the framing is never complete: no answer
    // of its own is coming, so the refusal is written now.)
    pending.once('finish', () => (socket.writable ? writeClientError(err, socket) : socket.destroy()));
    pending.once('close', () => socket.writable && !pending.writableFinished && socket.destroy());
    return;
  }
  if (pending && !pending.writableFinished && err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return answerUnreadBody(err, pending, socket);
  writeClientError(err, socket);
}

/**
 * The read bound passed while a request's body was being read: its handler waits on the body,
 * so the answer goes through the request's own response (Node then omits the body of a HEAD
 * answer and ends the connection). The handler sees the request aborted when the socket closes;
 * whatever it answers then is dropped (`finishApp` leaves a sent response alone).
 */
function answerUnreadBody(err: Error & { code?: string }, res: ServerResponse, socket: Socket): void {
  if (res.headersSent) {
    socket.destroy();
    return;
  }
  const { status, body } = refusalOf(err);
  answerAndClose(res, status, body);
}

/** Writes `status` with the JSON text `body` on `res`, the connection closed after it. */
function answerAndClose(res: ServerResponse, status: number, body: string): void {
  res.shouldKeepAlive = false;
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

/**
 * Writes {@link answerClientError}'s answer for `err` on `socket` and closes it. The body is left
 * out only when the refused request is known to be a HEAD (its answer has no body, and a client
 * would read one as the next response); a head too large whose method Node no longer holds gets the
 * body, since the connection closes right after it.
 */
function writeClientError(err: Error & { code?: string }, socket: Socket): void {
  const refusal = refusalOf(err);
  const head = (err as { rawPacket?: Buffer }).rawPacket?.toString('latin1', 0, 5);
  const body = head === 'HEAD ' ? '' : refusal.body;
  socket.end(
    `HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * Answers `status` with the `{error: {reason, message}}` body every 4xx has and closes the
 * connection (the request's body, if any, is left unread). A HEAD answer has no body (Node drops it).
 */
function refuseBeforeApp(res: ServerResponse, status: number, reason: string, message: string): void {
  answerAndClose(res, status, JSON.stringify({ error: { reason, message } }));
}

/**
 * The request listener {@link listen} gives Node: `app`, except for an HTTP/1.1 request without a
 * Host header, which RFC 9112 §3.2 has a server answer 400 — here `missing_host` in JSON, where
 * Node's own check (`requireHostHeader`, turned off for this) answers with an empty body. An
 * HTTP/1.0 request may leave Host out.
 */
function hostChecked(app: Express): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    if (req.httpVersion !== '1.0' && req.headers.host === undefined) {
      refuseBeforeApp(res, 400, 'missing_host', 'an HTTP/1.1 request must carry a Host header; send one');
      return;
    }
    app(req, res);
  };
}

/**
 * Answers a request whose `Expect` is not `100-continue` (Node's `checkExpectation`): 417
 * `expectation_failed` in JSON, the connection closed, the app never called — Node's default is
 * the status alone with an empty body.
 */
function refuseExpectation(_req: IncomingMessage, res: ServerResponse): void {
  refuseBeforeApp(res, 417, 'expectation_failed', 'the only Expect this server meets is 100-continue; send the request without it');
}

/** Settings of {@link listen}. */
export interface ListenOptions {
  /**
   * Read bound of one request, head and body, ms (default: `HTTP_REQUEST_READ_TIMEOUT_MS` of the
   * environment, else {@link REQUEST_READ_TIMEOUT_MS}).
   */
  requestReadTimeoutMs?: number;
}

/**
 * How often the server looks for requests past their read bound, ms: a fifth of the bound, between
 * 100 ms and 1 s, so a stalled request is answered at most that long after its bound.
 */
export function readCheckIntervalMs(readTimeoutMs: number): number {
  return Math.min(1000, Math.max(100, Math.floor(readTimeoutMs / 5)));
}

/**
 * Listens on `port` (0 = ephemeral) at `host` (default `GATEHOUSE_BIND_HOST`, else loopback only;
 * containers set `0.0.0.0`); resolves with the server and its bound port. A request must be read
 * whole — head and body — within the read bound (`opts.requestReadTimeoutMs`; Node's
 * `requestTimeout` and `headersTimeout`, checked every {@link readCheckIntervalMs}); a request the
 * HTTP parser refuses, or one past the bound, is answered by {@link answerClientError}, an HTTP/1.1
 * request without Host by {@link hostChecked} and an unmet `Expect` by {@link refuseExpectation},
 * each with a JSON reason. Once a
 * request is read, the bound no longer applies (a slow handler or an event stream is not cut).
 * @throws Error (rejects) when the port cannot be bound, or the environment's read bound is invalid.
 */
export async function listen(
  app: Express,
  port: number,
  host = process.env.GATEHOUSE_BIND_HOST ?? '127.0.0.1',
  opts: ListenOptions = {},
): Promise<{ server: Server; port: number }> {
  const readMs =
    opts.requestReadTimeoutMs ?? requestReadTimeoutEnv.HTTP_REQUEST_READ_TIMEOUT_MS.parse(process.env.HTTP_REQUEST_READ_TIMEOUT_MS);
  const server = createServer(
    {
      requestTimeout: readMs,
      headersTimeout: readMs,
      connectionsCheckingInterval: readCheckIntervalMs(readMs),
      requireHostHeader: false, // hostChecked answers it in JSON
    },
    hostChecked(app),
  );
  server.on('clientError', answerClientError);
  server.on('checkExpectation', refuseExpectation);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve({ server, port: (server.address() as AddressInfo).port });
    });
  });
}

/** Closes a server, waiting for in-flight requests (keep-alive sockets are closed). */
export async function closeServer(server: Server): Promise<void> {
  server.closeIdleConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
