import { subscribe } from 'node:diagnostics_channel';
import { recordDependencyError, type DependencyErrorKind, type DependencyName } from './metrics.ts';

/** A downstream reached over HTTP: requests whose URL starts with `prefix` are to `dependency`. */
export interface DependencyRoute {
  /** Absolute URL prefix, e.g. `http://127.0.0.1:7104/orders` or the model's base URL. */
  prefix: string;
  dependency: DependencyName;
}

/** The systems of record behind `STAGING_URL` (or your own), by path (docs/product/public-contract.md). */
const SYSTEM_OF_RECORD_PATHS: ReadonlyArray<[string, DependencyName]> = [
  ['/payments', 'payments'],
  ['/ledger', 'payments'],
  ['/orders', 'orders'],
  ['/mail', 'mail'],
  ['/changes', 'changes'],
];

/** Routes of the systems of record under `stagingUrl` plus the model's base URL(s). */
export function dependencyRoutes(stagingUrl: string, modelUrls: ReadonlyArray<string | undefined>): DependencyRoute[] {
  const base = stagingUrl.replace(/\/+$/, '');
  return [
    ...SYSTEM_OF_RECORD_PATHS.map(([path, dependency]) => ({ prefix: `${base}${path}`, dependency })),
    ...modelUrls.filter((u): u is string => Boolean(u)).map((u) => ({ prefix: u.replace(/\/+$/, ''), dependency: 'model' as const })),
  ];
}

let routes: DependencyRoute[] = [];
let subscribed = false;

type UndiciRequest = { origin?: unknown; path?: unknown };

function dependencyOf(request: UndiciRequest | undefined): DependencyName | undefined {
  if (!request) return undefined;
  const url = `${String(request.origin ?? '').replace(/\/+$/, '')}${String(request.path ?? '')}`;
  return routes.find((r) => url === r.prefix || url.startsWith(`${r.prefix}/`) || url.startsWith(`${r.prefix}?`))?.dependency;
}

/** The kind of a failed fetch from its error (undici's codes, the abort of a deadline). */
function kindOfError(err: unknown): DependencyErrorKind {
  const e = err as { name?: string; code?: string; cause?: { code?: string } } | undefined;
  const code = e?.code ?? e?.cause?.code ?? '';
  if (code === 'ECONNREFUSED') return 'refused';
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError' || /TIMEOUT/i.test(code)) return 'timeout';
  return 'connection';
}

/**
 * Counts failed HTTP requests to the dependencies of `list` in `gatehouse.dependency.errors`:
 * an answer 5xx (`http_5xx`) or 429 (`throttled`), no answer (`timeout`, `refused`,
 * `connection`). Reads undici's diagnostics channels, which Node's `fetch` publishes — the same
 * source as the undici instrumentation — so every adapter, order read and model request is seen
 * without touching its code, traced or not. Requests to no listed route are not counted. Call
 * again to replace the routes; subscribes once per process.
 */
export function observeDependencyErrors(list: DependencyRoute[]): void {
  routes = list;
  if (subscribed) return;
  subscribed = true;
  subscribe('undici:request:headers', (message) => {
    const { request, response } = message as { request?: UndiciRequest; response?: { statusCode?: number } };
    const status = response?.statusCode ?? 0;
    if (status < 500 && status !== 429) return;
    const dependency = dependencyOf(request);
    if (dependency) recordDependencyError(dependency, status === 429 ? 'throttled' : 'http_5xx');
  });
  subscribe('undici:request:error', (message) => {
    const { request, error } = message as { request?: UndiciRequest; error?: unknown };
    const dependency = dependencyOf(request);
    if (dependency) recordDependencyError(dependency, kindOfError(error));
  });
}
