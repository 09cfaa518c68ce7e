import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on a local port in front of `target` that a test can cut (every connection
 * destroyed, new ones refused) and restore — an outage of the server behind it without touching
 * the shared server itself — or point at another server (a failover to a promoted standby).
 */
export class TcpCut {
  readonly port: number;
  #target: { host: string; port: number };
  readonly #sockets = new Set<Socket>();
  #server: Server | undefined;

  constructor(port: number, target: { host: string; port: number }) {
    this.port = port;
    this.#target = target;
  }

  /** Starts (or restores) forwarding: resolves once the port accepts connections. */
  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.#target.port, this.#target.host);
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
  }

  /**
   * Points the proxy at `target` (a promoted standby, say): every forwarded connection is
   * destroyed, as a failover drops them, and new connections reach the new server. The listening
   * port is kept, so clients reconnect to the same address.
   */
  retarget(target: { host: string; port: number }): void {
    this.#target = target;
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
  }

  /** Cuts: destroys every forwarded connection and stops listening (new connections are refused). */
  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
