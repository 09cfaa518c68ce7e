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

const agent = new Agent({ keepAlive: true, maxSockets: 8 });

/**
 * Sends `req` to `baseUrl` with node's own client (which refuses only what no server could parse:
 * control characters in the path or header values). Resolves with the response; rejects on a
 * socket error, which a test treats as a failure (the server hung up instead of answering).
 */
export function send(baseUrl: string, req: RawRequest): Promise<RawResponse> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const r = httpRequest(
      { agent, host: url.hostname, port: url.port, method: req.method, path: req.path, headers: req.headers ?? {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    r.on('error', reject);
    r.end(req.body);
  });
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

/** Closes the keep-alive sockets of {@link send}. */
export function closeClient(): void {
  agent.destroy();
}
