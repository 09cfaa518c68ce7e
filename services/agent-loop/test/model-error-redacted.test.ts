import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { processTurn } from '../src/jobs/turns.processor.ts';
import { submittedRun, turnDeps } from './support/turn-run.ts';

// A model that is unavailable holds the round (DependencyUnavailable('model'), logged by the
// outage hold). The error's text is the model provider's answer, which may echo the request: it
// goes through the output boundary's `boundReason` like a downstream's reason (ADR 0710), and the
// error keeps no cause a logger would print.

const CANARY = 'CANARY_SECRET_model0710';
let t: TestDatabase;
let server: Server;
let baseURL: string;
let requests = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `overloaded while reading: "${CANARY} ${'x'.repeat(3000)}"`, type: 'server_error' } }));
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  await new Promise<void>((ok) => server?.close(() => ok()));
  await t?.drop();
});

describe('a model error held as an outage', () => {
  it('keeps the model’s text only redacted and bounded, and no cause', async () => {
    const id = await submittedRun(t.db);
    const err = await processTurn(
      { release: 'rel-1', workflowId: id, round: 1 },
      turnDeps(t.db, new OpenAI({ apiKey: 'sk-test-unused', baseURL, maxRetries: 0 })),
    ).then(
      () => null,
      (e: unknown) => e,
    );
    expect(requests).toBe(1);
    expect(err).toBeInstanceOf(DependencyUnavailable);
    const e = err as DependencyUnavailable;
    expect(e.dependency).toBe('model');
    expect(e.message).toMatch(/^model unavailable: 503 /);
    expect(e.message).not.toContain(CANARY);
    expect(e.message.length).toBeLessThan(200);
    expect(e.cause).toBeUndefined();
    // The run is held, not stopped: it waits for the model.
    const wf = await t.db.selectFrom('workflows').select(['state', 'stop_reason']).where('id', '=', id).executeTakeFirstOrThrow();
    expect(wf.stop_reason).toBeNull();
  });
});
