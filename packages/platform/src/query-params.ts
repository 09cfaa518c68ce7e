import type { NextFunction, Request, Response } from 'express';
import type { OpenApiDocument } from '@gatehouse/contracts';
import { UserError } from './errors.ts';

/** One documented operation: its method, a matcher of its path and the query parameters it takes. */
interface QueryRoute {
  method: string;
  path: RegExp;
  /** Literal segments first: `/api/webhooks/deliveries` before `/api/webhooks/{id}`. */
  templated: number;
  allowed: ReadonlySet<string>;
}

/** The HTTP methods an OpenAPI path item may hold operations of. */
const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const;

type Operation = { security?: unknown[]; parameters?: { in?: string; name?: string }[] };

/**
 * `/v1/workflows/{id}/events` → a RegExp matching one path segment per `{…}`, as express's
 * router matches a route by default: case-insensitively, with or without a trailing slash.
 */
function pathMatcher(template: string): RegExp {
  const source = template
    .split(/(\{[^}]+\})/)
    .map((part) => (part.startsWith('{') ? '[^/]+' : part.replace(/[.*+?^$()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}/?$`, 'i');
}

/** Every operation of `doc` that needs a caller (operations with `security: []`, e.g. `/healthz`, are left out). */
function queryRoutes(doc: OpenApiDocument): QueryRoute[] {
  const routes: QueryRoute[] = [];
  for (const [template, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = (item as Record<string, Operation | undefined>)[method];
      if (!op || (Array.isArray(op.security) && op.security.length === 0)) continue;
      const allowed = new Set((op.parameters ?? []).filter((p) => p.in === 'query' && p.name).map((p) => p.name!));
      routes.push({ method, path: pathMatcher(template), templated: (template.match(/\{/g) ?? []).length, allowed });
    }
  }
  return routes.sort((a, b) => a.templated - b.templated);
}

/**
 * Express middleware: a request to an operation of `doc` carrying a query parameter that
 * operation does not document is answered 400 `unknown_query_parameter`, naming the parameter and
 * the ones the operation takes — a typo such as `?limt=10` was silently ignored and the caller got
 * the default. The OpenAPI document is the one list of parameters
 * (docs/decisions/0688-every-bearer-token-expires.md, "Unknown query parameters"). Names are read
 * from the raw query string (`URLSearchParams`), whatever the query parser makes of them. Requests
 * outside the document (HTML pages, `/healthz`) and unauthenticated operations pass; `HEAD` is
 * checked as `GET`.
 * @throws never; passes a UserError (400) to the error middleware.
 */
export function refuseUnknownQuery(doc: OpenApiDocument) {
  const routes = queryRoutes(doc);
  return (req: Request, _res: Response, next: NextFunction): void => {
    const at = req.originalUrl.indexOf('?');
    if (at < 0) return next();
    const method = req.method === 'HEAD' ? 'get' : req.method.toLowerCase();
    const route = routes.find((r) => r.method === method && r.path.test(req.path));
    if (!route) return next();
    const names = [...new Set(new URLSearchParams(req.originalUrl.slice(at + 1)).keys())];
    const unknown = names.filter((name) => !route.allowed.has(name));
    if (unknown.length === 0) return next();
    const takes = route.allowed.size ? `it takes ${[...route.allowed].join(', ')}` : 'it takes none';
    next(
      new UserError(
        'unknown_query_parameter',
        `unknown query parameter${unknown.length > 1 ? 's' : ''} ${unknown.map((n) => JSON.stringify(n)).join(', ')}: ${takes}`,
        { details: unknown.map((name) => ({ path: name, message: 'unknown query parameter' })) },
      ),
    );
  };
}
