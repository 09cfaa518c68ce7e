import { Agent, request as httpRequest } from 'node:http';
import { connect } from 'node:net';

/** One HTTP request as the fuzzer builds it: the path goes on the wire exactly as given. */
export interface RawRequest {
  method: string;
  /** Request target, not normalized or re-encoded (e.g. `/v1/approvals/%`). */
  path: string;
  headers?: Record<string, string | string[]>;
  body?: Buffer | string;
}

/** What came back: status, headers and the body as text. */
export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/**
 * Sends `req` to `baseUrl` with node's own client (which refuses only what no server could parse:
 * control characters in the path or header values), on a connection of its own: a connection the
 * server closed after refusing one request must not fail the next. Resolves with the response;
 * rejects on a socket error, which a test treats as a failure (the server hung up instead of
 * answering). An event stream (`text/event-stream`), which stays open, resolves with its first
 * chunk and is closed by the client, as a browser's EventSource that navigates away.
 */
export function send(baseUrl: string, req: RawRequest): Promise<RawResponse> {
  const url = new URL(baseUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  return new Promise<RawResponse>((resolve, reject) => {
    // node frames a body of GET/DELETE/OPTIONS only when told its length (else the bytes would
    // reach the server as a second, garbage request).
    const headers = { ...req.headers, ...(req.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(req.body)) }) };
    const r = httpRequest({ agent, host: url.hostname, port: url.port, method: req.method, path: req.path, headers }, (res) => {
      const chunks: Buffer[] = [];
      const stream = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
      res.on('data', (c: Buffer) => {
        chunks.push(c);
        if (!stream) return;
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') });
        r.destroy();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(req.body);
  }).finally(() => agent.destroy());
}

/**
 * Writes `bytes` to a fresh connection and resolves with the status code of the first response
 * line (0 when the server closed without answering). For requests node's client refuses to send:
 * header injection, bare CR/LF, malformed request lines.
 */
export function sendRaw(baseUrl: string, bytes: string | Buffer): Promise<number> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    let head = '';
    socket.on('data', (c: Buffer) => {
      head += c.toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      if (m) {
        resolve(Number(m[1]));
        socket.destroy();
      }
    });
    socket.on('end', () => resolve(0));
    socket.on('close', () => resolve(0));
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve(0) : reject(err)));
    socket.write(bytes);
  });
}

/**
 * Writes `bytes` to a fresh connection, reads until the server closes it (or `waitMs` pass), and
 * resolves with every response on it, in order: status and body text (framed by Content-Length).
 * For a request whose framing leaves bytes over, which the server then reads as a second request.
 */
export function sendRawAll(baseUrl: string, bytes: string | Buffer, waitMs = 5000): Promise<Array<{ status: number; body: string }>> {
  const url = new URL(baseUrl);
  return new Promise((resolve) => {
    const socket = connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(splitResponses(Buffer.concat(chunks).toString('latin1')));
    };
    const timer = setTimeout(done, waitMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('close', done);
    socket.on('error', done);
    socket.write(bytes);
  });
}

/** Splits what a connection received into responses framed by their Content-Length. */
function splitResponses(wire: string): Array<{ status: number; body: string }> {
  const out: Array<{ status: number; body: string }> = [];
  let rest = wire;
  for (
    let m = /^HTTP\/1\.[01] (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(rest);
    m;
    m = /^HTTP\/1\.[01] (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(rest)
  ) {
    const length = Number(/^content-length: *(\d+)/im.exec(m[2]!)?.[1] ?? 0);
    out.push({ status: Number(m[1]), body: rest.slice(m[0].length, m[0].length + length) });
    rest = rest.slice(m[0].length + length);
  }
  return out;
}

/** Node's default `--max-http-header-size` (bytes): a longer request head is refused by its HTTP parser. */
export const MAX_HEAD_BYTES = 16 * 1024;

/**
 * Bytes of the request head node's client writes for `req` (request line, the headers given, plus
 * the Host, Connection and Content-Length lines it adds, with some slack for them).
 */
export function headBytes(req: RawRequest): number {
  let n = Buffer.byteLength(`${req.method} ${req.path} HTTP/1.1\r\n`) + 100;
  for (const [k, v] of Object.entries(req.headers ?? {}))
    for (const one of [v].flat()) n += Buffer.byteLength(`${k}: ${one}\r\n`, 'latin1');
  return n;
}
