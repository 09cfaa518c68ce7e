import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort, TcpCut } from '../src/index.ts';

// The proxy tests cut and re-point to fake an outage or a failover: check that it does both.

const servers: Server[] = [];
const proxies: TcpCut[] = [];

/** A server that answers each connection with its own name and keeps it open. */
async function namedServer(name: string): Promise<number> {
  const server = createServer((s) => s.write(name));
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** Connects to `port`; resolves with the socket and the first chunk it receives. */
async function greet(port: number): Promise<{ socket: Socket; said: string }> {
  return new Promise((done, fail) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('data', (d) => done({ socket, said: d.toString() }));
    socket.once('error', fail);
  });
}

const closed = (socket: Socket): Promise<void> => new Promise((done) => (socket.destroyed ? done() : socket.once('close', () => done())));

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.cut();
  for (const s of servers.splice(0)) await new Promise<void>((done) => s.close(() => done()));
});

describe('TcpCut', () => {
  it('cuts every forwarded connection, refuses new ones and opens again', async () => {
    const proxy = new TcpCut(await freePort(), { host: '127.0.0.1', port: await namedServer('a') });
    proxies.push(proxy);
    await proxy.open();
    const first = await greet(proxy.port);
    expect(first.said).toBe('a');
    await proxy.cut();
    await closed(first.socket);
    await expect(greet(proxy.port)).rejects.toThrow(/ECONNREFUSED/);
    await proxy.open();
    expect((await greet(proxy.port)).said).toBe('a');
  });

  it('re-points at another server on the same port, dropping the old connections', async () => {
    const proxy = new TcpCut(await freePort(), { host: '127.0.0.1', port: await namedServer('primary') });
    proxies.push(proxy);
    await proxy.open();
    const before = await greet(proxy.port);
    expect(before.said).toBe('primary');
    proxy.retarget({ host: '127.0.0.1', port: await namedServer('standby') });
    await closed(before.socket);
    const after = await greet(proxy.port);
    expect(after.said).toBe('standby');
    after.socket.destroy();
  });
});
