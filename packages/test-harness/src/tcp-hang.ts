import { connect, createServer, type Server, type Socket } from 'node:net';
import { freePort } from './infrastructure.ts';

/** A listener a test makes stop answering (see {@link startHangableProxy}). */
export interface HangableProxy {
  port: number;
  /** From now on nothing is forwarded either way: the server behind it looks hung (SIGSTOPped). */
  hang: () => void;
  /** Destroys every connection and stops listening. */
  close: () => Promise<void>;
}

/**
 * A TCP listener on a free local port that forwards to `target` until {@link HangableProxy.hang},
 * then forwards nothing either way — a server that accepts and never answers, as a SIGSTOPped
 * Postgres looks to a client, without touching the shared server. Without `target` it never
 * forwards (a server hung from the start). Unlike {@link TcpCut}, connections stay open.
 */
export async function startHangableProxy(target?: { host: string; port: number }): Promise<HangableProxy> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let hung = !target;
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('error', () => undefined);
    if (!target) return;
    const upstream = connect(target.port, target.host);
    sockets.add(upstream);
    upstream.on('error', () => client.destroy());
    client.on('data', (d) => void (hung || upstream.write(d)));
    upstream.on('data', (d) => void (hung || client.write(d)));
  });
  await new Promise<void>((done) => server.listen(port, '127.0.0.1', done));
  return {
    port,
    hang: () => void (hung = true),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}
