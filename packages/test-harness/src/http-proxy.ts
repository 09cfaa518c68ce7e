import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A running {@link startInterceptingProxy}: its base URL, and `close` (drops its connections). */
export interface InterceptingProxy {
  url: string;
  close(): Promise<void>;
}

/**
 * An HTTP proxy in front of `upstreamUrl`, for tests of a system of record that answers badly: each
 * request is first offered to `intercept`, which may answer it itself (a 503, a 200 in part) and
 * return true; every other request is passed through as it is. An upstream connection that fails
 * resets the client's connection too (the answer is lost, as the real one was).
 * @throws Error (rejects) when it cannot listen.
 */
export async function startInterceptingProxy(
  upstreamUrl: string,
  intercept: (req: IncomingMessage, res: ServerResponse) => boolean,
): Promise<InterceptingProxy> {
  const upstream = new URL(upstreamUrl);
  const server = createServer((req, res) => {
    if (intercept(req, res)) return;
    const up = request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => req.socket.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Answers `res` with `status` and `body` as JSON (for an `intercept` of {@link startInterceptingProxy}); true. */
export function answerJson(res: ServerResponse, status: number, body: unknown): true {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
  return true;
}
