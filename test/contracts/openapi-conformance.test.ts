import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Express } from 'express';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { approvalOpenApi, intakeOpenApi, opsOpenApi, type OpenApiDocument } from '@gatehouse/contracts';
import { tokenFor } from '@gatehouse/cli';
import { createAction } from '@gatehouse/testing';
import { SECRET, startFuzzApps, type FuzzApps, type Surface } from '../fuzz/support/apps.ts';

/**
 * Each HTTP service against its OpenAPI document (docs/decisions/0240-api-contracts-and-client.md):
 * every route the express app registers is in the document and every documented operation is a
 * route (both ways), each serves the document at `GET /openapi.json` without a token, and real
 * answers of its main routes validate against the documented response schema.
 */

/** Browser pages (HTML, forms, redirects) that are deliberately not part of a JSON API document. */
const PAGES: Record<Surface, string[]> = {
  'agent-loop': [],
  approval: [
    'GET /',
    'GET /inbox',
    'POST /inbox/session',
    'GET /inbox/signout',
    'GET /inbox/approvals',
    'POST /inbox/approvals/{id}/decision',
  ],
  ops: ['GET /', 'GET /signin', 'POST /session', 'GET /signout', 'GET /ops'],
};

const DOCS: Record<Surface, () => OpenApiDocument> = { 'agent-loop': intakeOpenApi, approval: approvalOpenApi, ops: opsOpenApi };

interface RouterLayer {
  rawPath?: string | string[];
  route?: { path: string | string[]; methods: Record<string, boolean> };
  handle: { stack?: RouterLayer[] };
}

/** `METHOD /path` of every route an express 5 app registered, mounted routers included; `:id` written `{id}`. */
export function registeredRoutes(app: Express): string[] {
  const out = new Set<string>();
  const walk = (stack: RouterLayer[], prefix: string) => {
    for (const layer of stack) {
      if (layer.route) {
        const paths = ([] as string[]).concat(layer.route.path);
        for (const p of paths)
          for (const [m, on] of Object.entries(layer.route.methods))
            if (on && m !== '_all') out.add(`${m.toUpperCase()} ${(prefix + p).replace(/:(\w+)/g, '{$1}')}`);
      } else if (layer.handle.stack) {
        const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
        walk(layer.handle.stack, prefix + mount);
      }
    }
  };
  walk((app as unknown as { router: { stack: RouterLayer[] } }).router.stack, '');
  return [...out].sort();
}

/** `METHOD /path` of every operation of a document. */
export function documentedRoutes(doc: OpenApiDocument): string[] {
  const methods = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
  return Object.entries(doc.paths ?? {})
    .flatMap(([path, item]) => methods.filter((m) => (item as Record<string, unknown>)[m]).map((m) => `${m.toUpperCase()} ${path}`))
    .sort();
}

/** A validator of the documented JSON body of `status` for `method path` (refs into the document's components resolve). */
function responseValidator(doc: OpenApiDocument, method: string, path: string, status: string) {
  const op = (doc.paths?.[path] as Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>)[
    method.toLowerCase()
  ];
  const schema = op?.responses[status]?.content?.['application/json']?.schema;
  if (!schema) throw new Error(`${method} ${path} documents no JSON ${status}`);
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  return ajv.compile({ ...schema, components: doc.components });
}

let f: FuzzApps;
let workflowId: string;
let approvalId: string;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  f = await startFuzzApps();
  const seeded = await createAction(f.db.db, { orderId: 'O-1002', amountCents: 12_000 });
  // An approved refund: its approval is among the workflow's open approvals and on the approval API's `approved` page.
  workflowId = seeded.workflowId;
  approvalId = seeded.approvalId!;
  for (const u of ['rep-ana', 'lead-eli', 'ops-gus']) tokens[u] = await tokenFor(u, SECRET);
});
afterAll(async () => {
  await f?.close();
});

describe('every route and its OpenAPI document agree', () => {
  for (const surface of ['agent-loop', 'approval', 'ops'] as const) {
    it(`${surface}: registered routes = documented operations + browser pages`, () => {
      const routes = registeredRoutes(f.apps[surface].app);
      const apiRoutes = routes.filter((r) => !PAGES[surface].includes(r));
      expect(
        PAGES[surface].filter((p) => !routes.includes(p)),
        'a listed page no longer exists',
      ).toEqual([]);
      const documented = documentedRoutes(DOCS[surface]());
      expect(
        apiRoutes.filter((r) => !documented.includes(r)),
        'routes missing from the document',
      ).toEqual([]);
      expect(
        documented.filter((d) => !apiRoutes.includes(d)),
        'documented operations with no route',
      ).toEqual([]);
    });

    it(`${surface}: serves its document at GET /openapi.json without a token`, async () => {
      const res = await fetch(`${f.apps[surface].url}/openapi.json`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual(JSON.parse(JSON.stringify(DOCS[surface]())));
    });
  }
});

/** GETs `path` on `surface` as `user` and checks the body against the documented 200 schema. */
async function expectDocumented(surface: Surface, user: string, docPath: string, url: string, status = '200', init?: RequestInit) {
  const res = await fetch(`${f.apps[surface].url}${url}`, {
    ...init,
    headers: { authorization: `Bearer ${tokens[user]}`, 'content-type': 'application/json' },
  });
  const body: unknown = await res.json();
  expect(String(res.status), JSON.stringify(body)).toBe(status);
  const validate = responseValidator(DOCS[surface](), init?.method ?? 'GET', docPath, status);
  expect(validate(body) ? [] : validate.errors, `${url}: ${JSON.stringify(body).slice(0, 400)}`).toEqual([]);
  return body as Record<string, unknown>;
}

describe('real answers validate against the documented response schemas', () => {
  it('intake: GET /v1/workflows/{id}, POST /v1/tickets, an error body', async () => {
    const view = await expectDocumented('agent-loop', 'rep-ana', '/v1/workflows/{id}', `/v1/workflows/${workflowId}`);
    expect((view.actions as unknown[]).length).toBe(1);
    expect((view.pendingApprovals as unknown[]).length).toBe(1);
    // The check has teeth: an unknown state or an undocumented field fails it.
    const validate = responseValidator(intakeOpenApi(), 'GET', '/v1/workflows/{id}', '200');
    expect(validate({ ...view, state: 'sleeping' })).toBe(false);
    expect(validate({ ...view, extra: 1 })).toBe(false);
    await expectDocumented('agent-loop', 'rep-ana', '/v1/tickets', '/v1/tickets', '202', {
      method: 'POST',
      body: JSON.stringify({ ticketId: 'T-OPENAPI-1', text: 'What is the status of order O-1001?' }),
    });
    await expectDocumented('agent-loop', 'rep-ana', '/v1/workflows/{id}', '/v1/workflows/not-a-uuid', '404');
  });

  it('approval: GET /v1/approvals, GET /v1/approvals/{id}', async () => {
    const page = await expectDocumented('approval', 'lead-eli', '/v1/approvals', '/v1/approvals?status=approved');
    expect((page.approvals as Array<{ approvalId: string }>).map((a) => a.approvalId)).toContain(approvalId);
    await expectDocumented('approval', 'lead-eli', '/v1/approvals/{id}', `/v1/approvals/${approvalId}`);
  });

  it('ops: every GET /api route', async () => {
    for (const path of [
      '/api/overview',
      '/api/workflows',
      '/api/workflows/stuck',
      '/api/operations/failed-unknown',
      '/api/reconciliation/worklist',
      '/api/queues',
    ])
      await expectDocumented('ops', 'ops-gus', path, path);
  });
});
