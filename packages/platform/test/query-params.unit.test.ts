import type { NextFunction, Request, Response } from 'express';
import { describe, expect, it } from 'vitest';
import type { OpenApiDocument } from '@gatehouse/contracts';
import { refuseUnknownQuery, UserError } from '../src/index.ts';

// ADR 0688: a query parameter an operation does not document is a 400 naming it. Express routes
// paths case-insensitively and with or without a trailing slash, so `/V1/APPROVALS?limt=10` and
// `/v1/approvals/?limt=10` reach the operation: the check must match them as the router does
// (found by h120's on-call pass: both answered 200 with the default page, the typo ignored).

const doc = {
  openapi: '3.1.0',
  info: { title: 't', version: '1' },
  paths: {
    '/v1/approvals': { get: { parameters: [{ in: 'query', name: 'limit' }] } },
    '/v1/approvals/{id}': { get: {} },
  },
} as unknown as OpenApiDocument;

/** What the middleware passes on for a GET of `url`: undefined (let through) or the error. */
function outcome(url: string): unknown {
  const at = url.indexOf('?');
  const req = { method: 'GET', originalUrl: url, path: at < 0 ? url : url.slice(0, at) } as Request;
  let passed: unknown = 'not called';
  refuseUnknownQuery(doc)(req, {} as Response, ((err?: unknown) => (passed = err)) as NextFunction);
  return passed;
}

describe('refuseUnknownQuery matches paths as express routes them', () => {
  it.each(['/v1/approvals?limt=10', '/V1/APPROVALS?limt=10', '/v1/approvals/?limt=10', '/v1/Approvals/abc/?limt=1'])(
    '%s: 400 unknown_query_parameter',
    (url) => {
      const err = outcome(url);
      expect(err).toBeInstanceOf(UserError);
      expect((err as UserError).message).toContain('"limt"');
    },
  );

  it.each(['/v1/approvals?limit=10', '/V1/APPROVALS/?limit=10', '/v1/approvalsx?limt=1'])('%s: let through', (url) => {
    expect(outcome(url)).toBeUndefined();
  });
});
