import createClient, { type Client } from 'openapi-fetch';
import type { components as ApprovalComponents, paths as ApprovalPaths } from './generated/approval.ts';
import type { components as IntakeComponents, paths as IntakePaths } from './generated/intake.ts';
import type { components as OpsComponents, paths as OpsPaths } from './generated/ops.ts';

export type { ApprovalPaths, IntakePaths, OpsPaths };

/** Bodies of the intake API (agent-loop), by component name: `WorkflowView`, `TicketRequest`, `ErrorBody`, … */
export type IntakeSchemas = IntakeComponents['schemas'];
/** Bodies of the approval API, by component name: `ApprovalView`, `ApprovalPage`, `DecisionRequest`, … */
export type ApprovalSchemas = ApprovalComponents['schemas'];
/** Bodies of the ops API, by component name: `OpsOverview`, `Worklist`, `OpsQueue`, … */
export type OpsSchemas = OpsComponents['schemas'];
/** `GET /v1/workflows/{id}`: where a workflow stands (docs/product/public-contract.md#intake). */
export type WorkflowView = IntakeSchemas['WorkflowView'];
/** `GET /v1/approvals/{id}`: the trusted view of one approval (docs/product/public-contract.md#approvals). */
export type ApprovalView = ApprovalSchemas['ApprovalView'];

/** A typed client of the intake API (openapi-fetch: `GET`, `POST`, … resolve `{data, error, response}`, never throw on 4xx/5xx). */
export type IntakeClient = Client<IntakePaths>;
/** A typed client of the approval API. */
export type ApprovalClient = Client<ApprovalPaths>;
/** A typed client of the ops API (operators only). */
export type OpsClient = Client<OpsPaths>;

/** Where a client sends its requests and as whom. */
export interface ClientSettings {
  /** The service's origin, e.g. `http://127.0.0.1:7101` (no trailing path). */
  baseUrl: string;
  /** The caller's bearer JWT (`gatehouse token --user …` locally); omitted for `/healthz`, `/readyz`, `/openapi.json`. */
  token?: string | null;
  /** Milliseconds before a request is aborted (default 10 000); each request gets a fresh timeout. */
  timeoutMs?: number;
  /** A fetch to send with (tests); default the global fetch. */
  fetch?: (input: Request) => Promise<Response>;
}

/** openapi-fetch options of {@link ClientSettings}: bearer header and a per-request timeout. */
function options(s: ClientSettings) {
  const timeoutMs = s.timeoutMs ?? 10_000;
  const send = s.fetch ?? ((input: Request) => fetch(input));
  return {
    baseUrl: s.baseUrl.replace(/\/+$/, ''),
    headers: s.token ? { authorization: `Bearer ${s.token}` } : {},
    fetch: (input: Request) => send(new Request(input, { signal: AbortSignal.any([input.signal, AbortSignal.timeout(timeoutMs)]) })),
  };
}

/**
 * A client of the intake API served by the agent-loop (default port 7101): `POST /v1/tickets`,
 * `GET /v1/workflows/{id}`, `POST /v1/workflows/{id}/messages`. Types come from
 * `openapi/intake.json`, generated from packages/contracts/src/api/intake.ts.
 * @example
 *   const intake = createIntakeClient({ baseUrl: 'http://127.0.0.1:7101', token });
 *   const { data, error } = await intake.GET('/v1/workflows/{id}', { params: { path: { id } } });
 */
export function createIntakeClient(settings: ClientSettings): IntakeClient {
  return createClient<IntakePaths>(options(settings));
}

/**
 * A client of the approval API (default port 7102): `GET /v1/approvals`, `GET /v1/approvals/{id}`,
 * `POST /v1/approvals/{id}/decision` (send back the `actionVersion` and `actionDigest` you read).
 */
export function createApprovalClient(settings: ClientSettings): ApprovalClient {
  return createClient<ApprovalPaths>(options(settings));
}

/** A client of the ops dashboard's JSON API (default port 7105, operators only): `GET /api/overview`, `/api/workflows`, … */
export function createOpsClient(settings: ClientSettings): OpsClient {
  return createClient<OpsPaths>(options(settings));
}
