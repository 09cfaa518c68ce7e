import { z } from 'zod';
import type { createDocument, ZodOpenApiObject, ZodOpenApiPathsObject, ZodOpenApiResponseObject } from 'zod-openapi';

/** An OpenAPI 3.1 document as zod-openapi's `createDocument` renders it (plain JSON). */
export type OpenApiDocument = ReturnType<typeof createDocument>;

/** The error body every Gatehouse HTTP API answers with on 4xx/5xx (packages/platform `finishApp`). */
export const ErrorBodySchema = z
  .object({
    error: z.object({
      reason: z.string().describe('machine-readable reason, e.g. `invalid_body`, `not_found`, `rate_limited_user`'),
      message: z.string(),
      details: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    }),
  })
  .meta({ id: 'ErrorBody' });
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/**
 * A row limit read from a query string: decimal digits only, then an integer 1..`max`;
 * `fallback` when absent. `z.coerce.number()` also took `1e1`, `0x10`, `+5`, ` 5` and `5.0` (what
 * `Number()` reads), so one limit had many spellings; those are now a 400 like any bad limit.
 */
export const queryLimit = (max: number, fallback: number) =>
  z
    .preprocess(
      (v) => (typeof v === 'string' && /^[0-9]{1,6}$/.test(v) ? Number(v) : v),
      // the default is the outer schema's; the document shows it on the number it describes
      z.number().int().min(1).max(max).meta({ default: fallback }),
    )
    .default(fallback);

/** An error response of `description` with the {@link ErrorBodySchema} body. */
export const errorResponse = (description: string): ZodOpenApiResponseObject => ({
  description,
  content: { 'application/json': { schema: ErrorBodySchema } },
});

/**
 * The 401 answer of every operation that needs a bearer token: the reasons the token check gives —
 * no header, a header not of the form `Bearer <token>`
 * (docs/decisions/0747-a-malformed-authorization-header-has-its-own-reason.md), a token that does
 * not verify, or one an operator revoked.
 */
export const unauthorizedResponse = (): ZodOpenApiResponseObject =>
  errorResponse(
    'missing or invalid token: missing_token, malformed_authorization (the Authorization header is not "Bearer <token>"), invalid_token or token_revoked',
  );

/** A JSON response of `description` whose body is `schema`. */
export const jsonResponse = (description: string, schema: z.ZodType): ZodOpenApiResponseObject => ({
  description,
  content: { 'application/json': { schema } },
});

/** `GET /healthz` body: the process is up. */
export const HealthSchema = z.object({ ok: z.literal(true), service: z.string() });
/** `GET /readyz` body: every dependency answered, or which did not (503). */
export const ReadySchema = z.object({
  ready: z.boolean(),
  service: z.string(),
  failing: z.record(z.string(), z.string()).optional().describe('dependency → error, on 503'),
  needsOperator: z
    .array(z.string())
    .optional()
    .describe('on 503, the failing checks that will not pass by themselves: an operator must act, waiting will not help (ADR 0729)'),
});

/**
 * The unauthenticated paths every HTTP service serves (`/healthz`, `/readyz`, `/openapi.json`),
 * as zod-openapi path items.
 */
export const commonPaths: ZodOpenApiPathsObject = {
  '/healthz': {
    get: { summary: 'The process is up', security: [], responses: { '200': jsonResponse('up', HealthSchema) } },
  },
  '/readyz': {
    get: {
      summary: 'Its dependencies (Postgres, Redis) are reachable',
      security: [],
      responses: { '200': jsonResponse('ready', ReadySchema), '503': jsonResponse('a dependency is down', ReadySchema) },
    },
  },
  '/openapi.json': {
    get: {
      summary: 'This OpenAPI 3.1 document',
      security: [],
      responses: { '200': jsonResponse('the document', z.record(z.string(), z.unknown())) },
    },
  },
};

/** The HTTP methods an OpenAPI path item may hold operations of. */
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'] as const;

/** The 400 every operation with a caller answers for a query parameter it does not document (packages/platform `refuseUnknownQuery`). */
const UNKNOWN_QUERY = 'unknown_query_parameter: a query parameter this operation does not take (named in the message)';

/** The 400 an operation with `{id}` in its path answers for an id whose percent-encoding does not decode. */
const BAD_PATH = "bad_path: the id's percent-encoding does not decode";

/**
 * The 400s the HTTP server of every service answers before any route (packages/platform `listen`,
 * `answerClientError`): a request its parser refuses, and an HTTP/1.1 request without a Host
 * header (RFC 9112 §3.2).
 */
const EDGE_400 = [
  'malformed_request: the request is not valid HTTP/1.1 (a malformed request line or header, bytes past its Content-Length); nothing was processed and the connection is closed',
  'missing_host: an HTTP/1.1 request without a Host header (RFC 9112 §3.2); nothing was processed and the connection is closed — send a Host header',
].join('; ');

/**
 * The answers the HTTP server of every service gives on any route, before the route runs
 * (packages/platform `listen`/`answerClientError`, docs/decisions/0690): one shared component each
 * (`components.responses`), referenced by every operation.
 */
const EDGE_RESPONSES: Record<'408' | '417' | '431', ZodOpenApiResponseObject> = {
  '408': {
    ...errorResponse(
      'request_timeout: the request (head and body) was not read whole within the server’s read bound (HTTP_REQUEST_READ_TIMEOUT_MS, default 5 s); nothing was processed and the connection is closed — send the whole request at once, then retry',
    ),
    id: 'RequestTimeout',
  },
  '417': {
    ...errorResponse(
      'expectation_failed: the request carried an Expect header other than 100-continue; nothing was processed and the connection is closed — send the request without it',
    ),
    id: 'ExpectationFailed',
  },
  '431': {
    ...errorResponse(
      'headers_too_large: the request head (request line and headers) is larger than the server reads (16 KiB); nothing was processed and the connection is closed — send fewer or shorter headers',
    ),
    id: 'HeadersTooLarge',
  },
};

/**
 * `paths` with the error answers every API operation can give whatever its own logic, added where
 * not already documented (the shared middleware of packages/platform `createHttpApp`/`finishApp`
 * answers them): 503 `dependency_unavailable` (the ledger or the queue unreachable or not answering
 * in time; `Retry-After` in seconds), for an operation with a JSON body 413 `body_too_large` (past
 * 1 MiB) and 415 `unsupported_charset`/`unsupported_encoding`, and for a path with `{id}` 400
 * `bad_path` (percent-encoding that does not decode), and 400 `unknown_query_parameter` (a query
 * parameter the operation does not document: packages/platform `refuseUnknownQuery`,
 * docs/decisions/0688-every-bearer-token-expires.md). Every operation, those without security
 * (`/healthz`, `/readyz`, `/openapi.json`) included, also gets 408 `request_timeout`, 417
 * `expectation_failed` and 431 `headers_too_large` (the HTTP server's own answers, before any
 * route: {@link EDGE_RESPONSES}) and 400 `malformed_request` and `missing_host`; the operations
 * without security get nothing else.
 */
export function withSharedErrors(paths: ZodOpenApiPathsObject = {}): ZodOpenApiPathsObject {
  const out: ZodOpenApiPathsObject = {};
  for (const [path, item] of Object.entries(paths)) {
    const next: Record<string, unknown> = { ...item };
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const responses = { ...op.responses } as Record<string, ZodOpenApiResponseObject>;
      for (const edge of ['408', '417', '431'] as const) responses[edge] ??= EDGE_RESPONSES[edge];
      if (Array.isArray(op.security) && op.security.length === 0) {
        responses['400'] = errorResponse([responses['400']?.description, EDGE_400].filter((d) => d).join('; '));
        next[method] = { ...op, responses };
        continue;
      }
      const bad400 = [responses['400']?.description, path.includes('{id}') ? BAD_PATH : null, UNKNOWN_QUERY, EDGE_400];
      responses['400'] = errorResponse(bad400.filter((d) => d).join('; '));
      if (op.requestBody) {
        responses['413'] ??= errorResponse('body_too_large: the body is larger than 1 MiB');
        responses['415'] ??= errorResponse(
          'unsupported_charset or unsupported_encoding: send utf-8 JSON, identity or gzip, deflate or br encoded',
        );
      }
      responses['503'] ??= errorResponse(
        'dependency_unavailable: the ledger or the queue is unreachable or did not answer in time; Retry-After in seconds (the request may still complete)',
      );
      next[method] = { ...op, responses };
    }
    out[path] = next as ZodOpenApiPathsObject[string];
  }
  return out;
}

/** The bearer-token security scheme the three APIs share. */
export const bearerSecurity: Pick<ZodOpenApiObject, 'components' | 'security'> = {
  components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
  security: [{ bearer: [] }],
};

/**
 * A uuid as a Postgres `uuid` column takes it in our ids: 8-4-4-4-12 hexadecimal digits, either
 * case, any version (zod `z.guid()`; `z.uuid()` also requires RFC 9562 version and variant bits,
 * which the column does not). The one check of every id that arrives in a path.
 */
export const UuidSchema = z.guid();

/**
 * Whether `value` is a {@link UuidSchema} uuid. A path id that is not one names nothing: answer
 * 404 and never send it to a uuid column (Postgres rejects the cast and fails the statement,
 * which would answer 500).
 */
export function isUuid(value: string): boolean {
  return UuidSchema.safeParse(value).success;
}

/** `:id` path parameter of a uuid-named resource. */
export const UuidPathSchema = z.object({ id: z.string().describe('uuid; anything else answers 404') });
