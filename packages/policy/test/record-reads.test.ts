import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { freePort } from '@gatehouse/test-harness';
import { fetchChange, fetchOrder, MalformedRecord, RecordRefused } from '../src/index.ts';

// An authoritative read that fails because the system of record is down is an outage — the step
// is held and the run's wait credited (docs/decisions/0110-outage-time.md) — while a bad answer
// is not (docs/decisions/0070-dead-letter-of-a-step.md). The order system here is a local server
// answering by path.

const ORDER = { id: 'O-1001', tenant: 'northwind', region: 'EU', paid: 12000, status: 'shipped' };

const answers: Record<string, (res: ServerResponse) => void> = {
  '/orders/O-1001': (res) => res.end(JSON.stringify(ORDER)),
  '/orders/O-busy': (res) => res.writeHead(429, { 'retry-after': '1' }).end('{}'),
  '/orders/O-5xx': (res) => res.writeHead(503).end('{"error":"maintenance"}'),
  '/orders/O-400': (res) => res.writeHead(400).end('{"error":"bad id"}'),
  '/orders/O-403': (res) => res.writeHead(403).end('{"error":{"reason":"read_not_allowed","message":"no"}}'),
  '/orders/O-html': (res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>login</html>'),
  '/orders/O-cut': (res) => {
    res.writeHead(200, { 'content-length': '500' });
    res.write('{"id":"O-cut",');
    setTimeout(() => res.socket?.destroy(), 20);
  },
  '/changes/CHG-5xx': (res) => res.writeHead(502).end(),
};

let server: Server;
let url = '';
beforeAll(async () => {
  server = createServer((req, res) => {
    const answer = answers[req.url ?? ''];
    if (answer) answer(res);
    else res.writeHead(404).end('{}');
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((ok) => server.close(ok));
});

const failure = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('authoritative reads of a system of record', () => {
  it('an order is read; an unknown one is null', async () => {
    expect(await fetchOrder(url, 'O-1001')).toEqual(ORDER);
    expect(await fetchOrder(url, 'O-none')).toBeNull();
  });

  it.each([
    ['refused (nothing listens)', async () => fetchOrder(`http://127.0.0.1:${await freePort()}`, 'O-1001'), /order system: no answer/],
    ['answered 429', async () => fetchOrder(url, 'O-busy'), /order system: answered 429/],
    ['answered 503', async () => fetchOrder(url, 'O-5xx'), /order system: answered 503/],
    ['cut in the middle of its answer', async () => fetchOrder(url, 'O-cut'), /order system: its answer was cut/],
    ['a change service answering 502', async () => fetchChange(url, 'CHG-5xx'), /change service: answered 502/],
  ])('%s: DependencyUnavailable(system_of_record), so the step is held', async (_what, read, message) => {
    const err = await failure(read());
    expect(err).toBeInstanceOf(DependencyUnavailable);
    expect((err as DependencyUnavailable).dependency).toBe('system_of_record');
    expect((err as Error).message).toMatch(message);
  });

  it('a bad answer is not an outage: 400 fails as an error, a body that is not JSON as a malformed record (the gateway retries, then the dead letter)', async () => {
    const refused = await failure(fetchOrder(url, 'O-400'));
    const html = await failure(fetchOrder(url, 'O-html'));
    for (const err of [refused, html]) {
      expect(err).toBeInstanceOf(Error);
      expect(err).not.toBeInstanceOf(DependencyUnavailable);
    }
    expect(refused).not.toBeInstanceOf(MalformedRecord);
    // A 4xx is the system's refusal, told apart by class: its status, and its reason when it gives one.
    expect(refused).toMatchObject({ name: 'RecordRefused', status: 400, refusal: null });
    expect(await failure(fetchOrder(url, 'O-403'))).toMatchObject({
      name: 'RecordRefused',
      status: 403,
      refusal: 'read_not_allowed',
      message: 'order system refused the read (403 read_not_allowed)',
    });
    expect(await failure(fetchOrder(url, 'O-403'))).toBeInstanceOf(RecordRefused);
    expect(html).toBeInstanceOf(MalformedRecord);
    expect((html as Error).message).toBe('order system answered a body that is not JSON');
  });
});
