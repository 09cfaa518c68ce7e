import { DelegationRejected } from '@gatehouse/credentials';
import { isConnectionFault } from '@gatehouse/ledger';
import {
  AmbiguousOutcome,
  ConflictError,
  Forbidden,
  GatehouseError,
  Gone,
  NotFound,
  PolicyDenied,
  Refused,
  SystemError,
  Unauthorized,
  UserError,
} from './errors.ts';

/** A class of the error tree (abstract or not). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ErrorClass = abstract new (...args: any[]) => GatehouseError;

/**
 * The one table from error class to HTTP status (docs/decisions/0290-one-error-tree-and-browser-session.md),
 * most specific class first: the first row the error is an instance of decides. A delegated
 * token that does not verify (`invalid_token…`) is 401, any other delegation refusal 403.
 */
export const HTTP_STATUS_BY_CLASS: ReadonlyArray<readonly [ErrorClass, number | ((err: GatehouseError) => number)]> = [
  [DelegationRejected, (err) => (err.reason.startsWith('invalid_token') ? 401 : 403)],
  [UserError, 400],
  [Unauthorized, 401],
  [Forbidden, 403],
  [PolicyDenied, 403],
  [NotFound, 404],
  [ConflictError, 409],
  [Gone, 410],
  [Refused, 422],
  [AmbiguousOutcome, 500],
  [SystemError, 503],
];

/** Maps an error to its HTTP status by class ({@link HTTP_STATUS_BY_CLASS}); anything else is 500. */
export function httpStatusOf(err: unknown): number {
  if (!(err instanceof GatehouseError)) return 500;
  const row = HTTP_STATUS_BY_CLASS.find(([cls]) => err instanceof cls);
  if (!row) return 500;
  return typeof row[1] === 'number' ? row[1] : row[1](err);
}

/** `Retry-After` of every 503: come back in 5 seconds (RFC 9110 §10.2.3). */
const RETRY_SOON = { 'retry-after': '5' };

/** The answer to a failed request: status, `{error: {reason, message, details?}}` and extra headers. */
export interface ErrorResponse {
  status: number;
  body: { error: { reason: string; message: string; details?: unknown } };
  headers: Record<string, string>;
}

/** body-parser's error types (its `type` field) that describe the request body, with our reason and words. */
const BODY_FAULTS: Record<string, { reason: string; message: string }> = {
  'entity.parse.failed': { reason: 'invalid_body', message: 'body must be one JSON object' },
  'entity.duplicate.key': { reason: 'invalid_body', message: 'body must be one JSON object naming each key once' },
  'entity.undecodable': { reason: 'invalid_body', message: 'the body is not valid text of its charset (send utf-8)' },
  'entity.too.large': { reason: 'body_too_large', message: 'body is too large' },
  'parameters.too.many': { reason: 'body_too_large', message: 'the form has too many fields' },
  'encoding.unsupported': { reason: 'unsupported_encoding', message: 'content-encoding must be identity, gzip, deflate or br' },
  'charset.unsupported': { reason: 'unsupported_charset', message: 'the body charset is not supported; send utf-8' },
  'request.aborted': { reason: 'invalid_body', message: 'the request body was aborted' },
  'request.size.invalid': { reason: 'invalid_body', message: 'the body length does not match content-length' },
};

/** Reasons of a 4xx error from express's own libraries (http-errors: serve-static, raw-body) by status. */
const STATUS_REASONS: Record<number, string> = {
  404: 'not_found',
  405: 'method_not_allowed',
  413: 'body_too_large',
  415: 'unsupported_media_type',
  416: 'range_not_satisfiable',
};

const answer = (status: number, reason: string, message: string, headers: Record<string, string> = {}): ErrorResponse => ({
  status,
  body: { error: { reason, message } },
  headers,
});

/**
 * The 4xx a request-level failure of express's own libraries deserves, or null when the error is not the caller's:
 * - a path whose percent-encoding does not decode (the router's `decodeURIComponent` throws
 *   `URIError` while matching `:params`): 400 `bad_path`;
 * - a body-parser failure (it sets `type`): its own 4xx status with a reason from {@link BODY_FAULTS};
 * - a body that does not inflate with its `content-encoding` (zlib's `Z_*` codes, brotli's
 *   `ERR__ERROR_*`): 400 `invalid_body`;
 * - any other 4xx error that express's libraries mark safe to show (http-errors' `expose: true`):
 *   its status, a reason from {@link STATUS_REASONS} (else `bad_request`) and its message.
 */
function clientFaultOf(err: unknown): ErrorResponse | null {
  if (err instanceof URIError) return answer(400, 'bad_path', 'the request path has malformed percent-encoding');
  const e = err as { status?: unknown; type?: unknown; expose?: unknown; code?: unknown; message?: unknown } | null;
  if (!e || typeof e !== 'object' || typeof e.status !== 'number' || e.status < 400 || e.status >= 500) return null;
  if (typeof e.type === 'string') {
    const known = BODY_FAULTS[e.type];
    return answer(e.status, known?.reason ?? 'invalid_body', known?.message ?? String(e.message));
  }
  if (e.expose !== true) return null;
  // zlib's codes are Z_* (gzip, deflate); brotli's decoder errors are ERR__ERROR_* (`br`).
  if (typeof e.code === 'string' && (e.code.startsWith('Z_') || e.code.startsWith('ERR__ERROR_'))) {
    return answer(400, 'invalid_body', 'the body does not decode with its content-encoding');
  }
  return answer(e.status, STATUS_REASONS[e.status] ?? 'bad_request', String(e.message));
}

/**
 * The answer to an error a request ended with, or null when it is none of ours to explain (the
 * caller logs it and answers 500 `internal`, internals not exposed):
 * - a malformed request that express's libraries refused (see {@link clientFaultOf}): its 4xx;
 * - an error of the tree: its status by class ({@link httpStatusOf}), its `reason`, its
 *   `publicMessage` and, for a {@link UserError}, its `details`; a 503 also `Retry-After: 5`;
 * - an unreachable dependency (a refused or reset connection of Postgres or Redis): 503
 *   `dependency_unavailable` with `Retry-After: 5` (seconds).
 */
export function errorResponseOf(err: unknown): ErrorResponse | null {
  const fault = clientFaultOf(err);
  if (fault) return fault;
  if (err instanceof GatehouseError) {
    const status = httpStatusOf(err);
    // A 503 (a SystemError: a dependency that cannot answer now) says when to come back, as the connection fault below does.
    const r = answer(status, err.reason, err.publicMessage, status === 503 ? RETRY_SOON : {});
    if (err instanceof UserError && err.details !== undefined) r.body.error.details = err.details;
    return r;
  }
  if (isConnectionFault(err)) {
    return answer(503, 'dependency_unavailable', 'a dependency is unavailable; retry shortly', RETRY_SOON);
  }
  return null;
}
