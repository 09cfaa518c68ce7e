import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BodyTooLarge, fetchCapped, resetTestFaultsForTests } from '@gatehouse/contracts';
import { attempt } from '../src/adapters/http-call.ts';

// Downstream response bodies are read with a cap (1 MiB by default): an oversized body is a
// bounded failure, never memory growth (docs/decisions/0181-abuse-limits.md).
const MiB = 1024 * 1024;
let server: Server;
let base: string;
/** Bytes the server managed to write of each endless response before the client hung up. */
const written: number[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === '/declared') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(2 * MiB) });
      res.end(Buffer.alloc(2 * MiB, 0x20));
      return;
    }
    if (req.url === '/small') {
      res.setHeader('content-type', 'application/json');
      res.end('{"ok":true}');
      return;
    }
    // Chunked, no declared length, and it never ends: only the client's cap stops it.
    res.writeHead(200, { 'content-type': 'application/json' });
    let sent = 0;
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const push = (): void => {
      while (sent < 64 * MiB) {
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', push);
      }
      res.end();
    };
    res.on('close', () => written.push(sent));
    push();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => server?.close());
afterEach(() => {
  delete process.env.GATEHOUSE_TEST_DISABLE_BODY_CAP;
  resetTestFaultsForTests();
  delete process.env.DOWNSTREAM_BODY_LIMIT_BYTES;
});

describe('downstream body cap', () => {
  it('a small body reads as before', async () => {
    expect(await (await fetchCapped(`${base}/small`)).json()).toEqual({ ok: true });
  });

  it('a declared length over the cap fails before reading', async () => {
    await expect(fetchCapped(`${base}/declared`)).rejects.toThrow(BodyTooLarge);
  });

  it('an endless streamed body fails at the cap, and the stream is abandoned', async () => {
    const before = written.length;
    const res = await fetchCapped(`${base}/endless`);
    await expect(res.text()).rejects.toThrow(/exceeds 1048576 bytes/);
    // The connection is dropped: the server stops far short of its 64 MiB.
    const deadline = Date.now() + 60_000;
    while (written.length === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(written[before]).toBeLessThan(64 * MiB);
  });

  it('the adapter attempt treats an oversized answer as no response (outcome unknown), bounded', async () => {
    const out = await attempt(`${base}/endless`, { method: 'POST' }, 30_000);
    expect(out).toEqual({ kind: 'no_response', error: 'BodyTooLarge' });
  });

  it('DOWNSTREAM_BODY_LIMIT_BYTES sets the cap', async () => {
    process.env.DOWNSTREAM_BODY_LIMIT_BYTES = '5';
    await expect(fetchCapped(`${base}/small`)).rejects.toThrow(/exceeds 5 bytes/);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_BODY_CAP): the oversized body is read whole; refused outside GATEHOUSE_ENV=test', async () => {
    process.env.GATEHOUSE_TEST_DISABLE_BODY_CAP = '1';
    resetTestFaultsForTests();
    const saved = process.env.GATEHOUSE_ENV;
    try {
      process.env.GATEHOUSE_ENV = 'local';
      resetTestFaultsForTests();
      await expect(fetchCapped(`${base}/declared`)).rejects.toThrow(/GATEHOUSE_ENV=test/);
      process.env.GATEHOUSE_ENV = 'test';
      resetTestFaultsForTests();
      expect((await (await fetchCapped(`${base}/declared`)).text()).length).toBe(2 * MiB);
    } finally {
      process.env.GATEHOUSE_ENV = saved;
      resetTestFaultsForTests();
    }
  });
});
