import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Redis } from 'ioredis';
import { approvalOpenApi, intakeOpenApi, opsOpenApi, type OpenApiDocument } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, QueueRegistry, type OutboxRelay } from '@gatehouse/platform';
import { freePort, rawExchange } from '@gatehouse/test-harness';
import { createIntakeApp, WorkflowEventHub } from '@gatehouse/agent-loop';
import { createApprovalApp } from '@gatehouse/approval';
import { createOpsApp, createQueueBoard } from '@gatehouse/ops';
import { SECRET, startFuzzApps, type FuzzApps } from '../fuzz/support/apps.ts';

/**
 * The error statuses every operation of the intake, approval and ops APIs really answers are in their
 * OpenAPI documents, each with the ErrorBody schema (docs/decisions/0240-api-contracts-and-client.md):
 * 503 `dependency_unavailable` when the ledger is unreachable, 413 and 415 for a body too large or
 * in an unsupported charset, 400 `bad_path` for a path id whose percent-encoding does not decode;
 * and on every operation, the public ones included, the HTTP server's own 431 `headers_too_large`,
 * 408 `request_timeout` (docs/decisions/0690), 417 `expectation_failed` and 400 `malformed_request`
 * and `missing_host`,
 * shared components of each document (the 400 among the operation's own 400 reasons).
 */

/** The dead apps' read bound (HTTP_REQUEST_READ_TIMEOUT_MS), ms: short, so the 408s come quickly. */
const READ_MS = 1000;

type Api = 'agent-loop' | 'approval' | 'ops';
const APIS = ['agent-loop', 'approval', 'ops'] as const;
const DOCS: Record<Api, () => OpenApiDocument> = { 'agent-loop': intakeOpenApi, approval: approvalOpenApi, ops: opsOpenApi };
const USER: Record<Api, string> = { 'agent-loop': 'rep-ana', approval: 'lead-eli', ops: 'ops-gus' };
/**
 * Operations that never wait on the ledger: `GET /api/queues` lists the board's queues with their
 * Redis counts, each bounded and null when Redis does not answer (ADR 0651) — its 503 is the
 * response deadline's, not the dead ledger's.
 */
const NO_LEDGER = new Set(['GET /api/queues']);

interface Operation {
  method: string;
  path: string;
  hasBody: boolean;
  documented: string[];
}

/** Every operation of `doc` that needs a bearer token (the public `/healthz`, `/readyz`, `/openapi.json` are not API calls). */
function operations(doc: OpenApiDocument): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {}))
    for (const [method, op] of Object.entries(item as Record<string, { security?: unknown[]; requestBody?: unknown; responses: object }>)) {
      if (Array.isArray(op.security) && op.security.length === 0) continue;
      out.push({ method: method.toUpperCase(), path, hasBody: op.requestBody !== undefined, documented: Object.keys(op.responses) });
    }
  return out;
}

/** Every operation of `doc` with its documented statuses, the public ones (`/healthz`, `/readyz`, `/openapi.json`) included. */
function everyOperation(doc: OpenApiDocument): Array<{ method: string; path: string; responses: Record<string, unknown> }> {
  return Object.entries(doc.paths ?? {}).flatMap(([path, item]) =>
    Object.entries(item as Record<string, { responses: Record<string, unknown> }>).map(([method, op]) => ({
      method: method.toUpperCase(),
      path,
      responses: op.responses,
    })),
  );
}

/** The documented answer of `status` in `responses`, a `$ref` into `components.responses` followed; undefined when none. */
function documentedAnswer(doc: OpenApiDocument, responses: Record<string, unknown>, status: string) {
  const r = responses[status] as { $ref?: string; description?: string; content?: Record<string, { schema: object }> } | undefined;
  const ref = r?.$ref?.replace('#/components/responses/', '');
  return ref ? (doc.components?.responses?.[ref] as typeof r) : r;
}

function errorBodyValidator(doc: OpenApiDocument) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  return ajv.compile({ $ref: '#/components/schemas/ErrorBody', components: doc.components });
}

/** A body each operation takes (its content does not matter to these answers). */
const bodyOf = (path: string): unknown =>
  path === '/v1/tickets'
    ? { ticketId: `T-DOC-${randomUUID().slice(0, 8)}`, text: 'status of order O-1001?' }
    : path === '/api/webhooks'
      ? { tenant: 'quillfeather', url: 'http://127.0.0.1:9/hook' }
      : path === '/api/token-revocations'
        ? { subject: 'rep-ana', reason: 'a body the route takes' }
        : path.endsWith('/decision')
          ? { decision: 'approve', actionVersion: 1, actionDigest: 'a'.repeat(64) }
          : { text: 'any update?' };

let f: FuzzApps;
let deadLedger: Db;
let deadRedis: Redis;
let deadQueues: QueueRegistry;
const dead: Partial<Record<Api, { server: Server; url: string }>> = {};
const tokens: Record<string, string> = {};

beforeAll(async () => {
  f = await startFuzzApps();
  for (const u of Object.values(USER)) tokens[u] = await tokenFor(u, SECRET);
  // A ledger nobody listens on: every query is refused.
  const url = `postgres://gatehouse@127.0.0.1:${await freePort()}/nothing`;
  deadLedger = createDb(url, 2);
  const log = createLogger('openapi-error-statuses', { write: () => true } as never);
  const relay = { publish: async () => undefined } as unknown as OutboxRelay;
  // Revocation is not what these answers are about: its check would read the dead ledger first and
  // answer 503 before any route (fail closed, ADR 0695; test/credentials/user-token-revocation.test.ts).
  // A check that reads nothing keeps each operation's own answer observable.
  const verifier = { secret: SECRET, revocations: { assertNotRevoked: async () => undefined } };
  const common = { db: deadLedger, relay, auditHmacKey: 'openapi-error-statuses-audit-key-0123', verifier, log };
  const apps = {
    'agent-loop': createIntakeApp({
      ...common,
      release: 'rel-1',
      packs: () => {
        throw new Error('not reached: the ledger refuses first');
      },
      events: { hub: new WorkflowEventHub(url, log), pollMs: 1000, heartbeatMs: 15_000 },
    }),
    approval: createApprovalApp({ ...common, localSecret: null, secureCookie: false }),
    // Its board over a Redis never connected to (counts are null at once, ADR 0651).
    ops: createOpsApp({ ...common, board: deadBoard(url), localSecret: null, secureCookie: false }),
  };
  for (const api of APIS) {
    const l = await listen(apps[api], 0, '127.0.0.1', { requestReadTimeoutMs: READ_MS });
    dead[api] = { server: l.server, url: `http://127.0.0.1:${l.port}` };
  }
});
/** The ops queue board over the dead ledger and a Redis nobody listens on, never connected (lazy). */
function deadBoard(ledgerUrl: string) {
  deadRedis = new Redis(`redis://127.0.0.1:${new URL(ledgerUrl).port}`, { lazyConnect: true, maxRetriesPerRequest: 0 });
  deadQueues = new QueueRegistry(deadRedis, 'openapi-error-statuses');
  return createQueueBoard({ db: deadLedger, redis: deadRedis, queues: deadQueues });
}

afterAll(async () => {
  for (const d of Object.values(dead)) await closeServer(d.server);
  await deadQueues?.close().catch(() => undefined);
  deadRedis?.disconnect();
  await deadLedger?.destroy().catch(() => undefined);
  await f?.close();
});

async function send(base: string, api: Api, method: string, path: string, body?: string, contentType = 'application/json') {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${tokens[USER[api]]}`, ...(body !== undefined ? { 'content-type': contentType } : {}) },
    body,
    signal: AbortSignal.timeout(15_000),
  });
  return { status: r.status, body: (await r.json()) as { error?: { reason: string } } };
}

describe('documented query parameters are not refused (ADR 0688)', () => {
  it.each([
    ['agent-loop', `/v1/workflows/${randomUUID()}/events?lastEventId=0`],
    ['approval', '/v1/approvals?status=pending&limit=10'],
  ] as const)('%s %s reaches the ledger (503 from the unreachable one)', async (api, path) => {
    expect((await send(dead[api]!.url, api, 'GET', path)).status).toBe(503);
  });
});

for (const api of APIS) {
  describe(`${api}: every error status an operation answers is documented`, () => {
    const doc = DOCS[api]();
    const validate = errorBodyValidator(doc);
    const expectDocumented = (op: Operation, answer: { status: number; body: unknown }, status: number, reason: string) => {
      expect([answer.status, (answer.body as { error?: { reason: string } }).error?.reason]).toEqual([status, reason]);
      expect(op.documented, `${op.method} ${op.path} answers ${status} ${reason}`).toContain(String(status));
      expect(validate(answer.body) ? [] : validate.errors).toEqual([]);
    };

    it('every operation, the public ones too, documents and answers 431 headers_too_large, 408 request_timeout (ADR 0690), 417 expectation_failed, 400 malformed_request and missing_host', async () => {
      const port = Number(new URL(dead[api]!.url).port);
      const ops = everyOperation(doc);
      const answers = await Promise.all(
        ops.map(async (op) => {
          const requestLine = `${op.method} ${op.path.replace('{id}', randomUUID())} HTTP/1.1\r\n`;
          const line = `${requestLine}Host: x\r\n`;
          const big = await rawExchange(port, [`${line}X-Big: ${'a'.repeat(20_000)}\r\n\r\n`]);
          // A head that never ends: the server's read bound, before any route or the ledger.
          const stalled = await rawExchange(port, [line], { waitMs: READ_MS + 15_000 });
          const expecting = await rawExchange(port, [`${line}Expect: 200-ok\r\n\r\n`]);
          const hostless = await rawExchange(port, [`${requestLine}\r\n`]);
          const malformed = await rawExchange(port, [`${line}No colon here\r\n\r\n`]);
          return { op, big, stalled, expecting, hostless, malformed };
        }),
      );
      for (const { op, big, stalled, expecting, hostless, malformed } of answers) {
        for (const [status, reason, got] of [
          [431, 'headers_too_large', big],
          [408, 'request_timeout', stalled],
          [417, 'expectation_failed', expecting],
          [400, 'missing_host', hostless],
          [400, 'malformed_request', malformed],
        ] as const) {
          const name = `${op.method} ${op.path} answers ${status} ${reason}`;
          expect([got.status, (JSON.parse(got.body || '{}') as { error?: { reason?: string } }).error?.reason], name).toEqual([
            status,
            reason,
          ]);
          const documented = documentedAnswer(doc, op.responses, String(status));
          expect(documented?.description, name).toMatch(new RegExp(`(^|; )${reason}:`));
          expect(documented?.content?.['application/json']?.schema, name).toEqual({ $ref: '#/components/schemas/ErrorBody' });
          expect(validate(JSON.parse(got.body)) ? [] : validate.errors, name).toEqual([]);
        }
      }
    });

    it.each(
      operations(doc)
        .filter((op) => !NO_LEDGER.has(`${op.method} ${op.path}`))
        .map((op) => [`${op.method} ${op.path}`, op] as const),
    )('%s: 503 dependency_unavailable when the ledger is unreachable', async (_name, op) => {
      const path = op.path.replace('{id}', randomUUID());
      const answer = await send(dead[api]!.url, api, op.method, path, op.hasBody ? JSON.stringify(bodyOf(op.path)) : undefined);
      expectDocumented(op, answer, 503, 'dependency_unavailable');
    });

    it.each(operations(doc).map((op) => [`${op.method} ${op.path}`, op] as const))(
      '%s: 400 unknown_query_parameter naming a parameter it does not take, before the ledger is read (ADR 0688)',
      async (_name, op) => {
        const path = `${op.path.replace('{id}', randomUUID())}?limt=10`;
        // The ledger is unreachable: an answer other than 503 was given before any ledger read.
        const answer = await send(dead[api]!.url, api, op.method, path, op.hasBody ? JSON.stringify(bodyOf(op.path)) : undefined);
        expectDocumented(op, answer, 400, 'unknown_query_parameter');
        expect((answer.body as unknown as { error: { message: string } }).error.message).toContain('"limt"');
      },
    );

    it.each(
      operations(doc)
        .filter((op) => op.hasBody)
        .map((op) => [`${op.method} ${op.path}`, op] as const),
    )('%s: 413 body_too_large past 1 MiB, 415 unsupported_charset for a charset other than utf-8', async (_name, op) => {
      const path = op.path.replace('{id}', randomUUID());
      const huge = JSON.stringify({ ...(bodyOf(op.path) as object), pad: 'x'.repeat(1_100_000) });
      expectDocumented(op, await send(f.apps[api].url, api, op.method, path, huge), 413, 'body_too_large');
      const latin = await send(f.apps[api].url, api, op.method, path, JSON.stringify(bodyOf(op.path)), 'application/json; charset=koi8-r');
      expectDocumented(op, latin, 415, 'unsupported_charset');
    });

    it.each(
      operations(doc)
        .filter((op) => op.path.includes('{id}'))
        .map((op) => [`${op.method} ${op.path}`, op] as const),
    )('%s: 400 bad_path for an id whose percent-encoding does not decode', async (_name, op) => {
      const path = op.path.replace('{id}', '%E0%A4%A');
      const answer = await send(f.apps[api].url, api, op.method, path, op.hasBody ? JSON.stringify(bodyOf(op.path)) : undefined);
      expectDocumented(op, answer, 400, 'bad_path');
    });
  });
}
