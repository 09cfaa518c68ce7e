import { z } from 'zod';
import { createDocument, type ZodOpenApiObject } from 'zod-openapi';
import {
  bearerSecurity,
  commonPaths,
  type OpenApiDocument,
  errorResponse,
  jsonResponse,
  unauthorizedResponse,
  queryLimit,
  withSharedErrors,
} from './common.ts';
import { WorkflowStateSchema } from './intake.ts';
import { personText, storableString } from '../text.ts';
import {
  WebhookDeliveryQuerySchema,
  WebhookDeliveryViewSchema,
  WebhookEndpointViewSchema,
  WebhookRegisteredSchema,
  WebhookRegistrationSchema,
} from './events.ts';

/** Query of the ops dashboard's JSON routes: an optional workflow state filter and a row limit (1–500, default 50). */
export const OpsQuerySchema = z.object({
  state: WorkflowStateSchema.optional(),
  limit: queryLimit(500, 50),
});

/**
 * Query of the dashboard's lists that no state filters (stuck runs, `failed_unknown` operations,
 * the worklist): a row limit only (1–500, default 50). A `state` there is refused as an unknown
 * parameter, never ignored: the list would not be the one asked for.
 */
export const OpsLimitQuerySchema = z.object({
  limit: queryLimit(500, 50),
});

/** One row of the recent-workflows list: ids and states only, never ticket or model text. */
export const OpsWorkflowRowSchema = z
  .object({
    id: z.string(),
    tenant: z.string(),
    ticketId: z.string(),
    pack: z.string(),
    state: z.string(),
    stopReason: z.string().nullable(),
    nextStep: z.string().nullable(),
    release: z.string(),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: 'OpsWorkflowRow' });
export type OpsWorkflowRow = z.infer<typeof OpsWorkflowRowSchema>;

/** Workflow counts per state (every state present, zero when none) and the most recent ones. */
export const WorkflowOverviewSchema = z
  .object({ counts: z.record(z.string(), z.number().int()), recent: z.array(OpsWorkflowRowSchema) })
  .meta({ id: 'WorkflowOverview' });
export type WorkflowOverview = z.infer<typeof WorkflowOverviewSchema>;

/** A live run with no progress for longer than its state allows (and no legitimate wait). */
export const StuckRunSchema = z
  .object({
    workflowId: z.string(),
    state: z.string(),
    ageMs: z.number().describe('milliseconds since the run last changed state'),
    boundMs: z.number(),
    waitingFor: z.array(z.string()).describe('job ids it waits for (`turn_…`, `exec_…`), empty when nothing can drive it'),
    watchdog: z
      .object({ atMs: z.number(), outcome: z.string(), count: z.number().int() })
      .nullable()
      .describe("the watchdog's latest re-drive of this run (audit `run.redriven`)"),
  })
  .meta({ id: 'StuckRun' });

/** A `failed_unknown` operation: its effect may or may not have happened (docs/product/reconciliation.md). */
export const UnknownOperationSchema = z
  .object({
    key: z.string(),
    tool: z.string(),
    workflowId: z.string(),
    workflowState: z.string(),
    release: z.string(),
    attempts: z.number().int(),
    error: z.string().nullable(),
    since: z.iso.datetime().describe('when it became unknown'),
  })
  .meta({ id: 'UnknownOperation' });
export type UnknownOperationRow = z.infer<typeof UnknownOperationSchema>;

/** One open item of the reconciliation worklist (docs/product/reconciliation.md): a difference and who must repair it. */
export const WorklistItemSchema = z
  .object({
    id: z.string(),
    runId: z.string(),
    class: z.string(),
    owner: z.string(),
    status: z.string().describe('`open`, or `frozen` (an amount mismatch holds both records until a lead’s remediation)'),
    subject: z.string().describe('natural key of the difference (`op:<key>`, `refund:<refundId>`, `order:<orderId>`)'),
    tenant: z.string().nullable(),
    operationKey: z.string().nullable(),
    workflowId: z.string().nullable(),
    tool: z.string().nullable(),
    orderId: z.string().nullable(),
    amountCents: z.number().int().nullable(),
    ledgerRef: z.string().nullable(),
    detail: z.unknown(),
    remediation: z.string().nullable().describe('the lead-approved remediation bound to the item, if one was chosen'),
    createdAt: z.iso.datetime(),
    lastSeenAt: z.iso.datetime().describe('when a reconciliation pass last saw the difference'),
  })
  .meta({ id: 'WorklistItem' });
export type WorklistRow = z.infer<typeof WorklistItemSchema>;

/** The worklist, or why it cannot be read (the table is missing before its migration). */
export const WorklistSchema = z
  .union([
    z.object({ available: z.literal(true), items: z.array(WorklistItemSchema) }),
    z.object({ available: z.literal(false), reason: z.string(), items: z.array(WorklistItemSchema).max(0) }),
  ])
  .meta({ id: 'Worklist' });
export type Worklist = z.infer<typeof WorklistSchema>;

/** One BullMQ queue of one release on the board, with its job counts per state (null when Redis did not answer). */
export const OpsQueueSchema = z
  .object({
    name: z.string().describe('`<base>.<release>`, e.g. `executions.rel-1`'),
    base: z.string(),
    release: z.string(),
    sources: z.array(z.enum(['manifest', 'releases_table', 'redis'])).describe('where the dashboard learned of the queue'),
    counts: z.record(z.string(), z.number().int()).nullable(),
  })
  .meta({ id: 'OpsQueue' });
export type OpsQueue = z.infer<typeof OpsQueueSchema>;

/** `GET /api/overview`: everything the `/ops` page shows. */
export const OpsOverviewSchema = z
  .object({
    stateFilter: WorkflowStateSchema.nullable(),
    workflows: WorkflowOverviewSchema,
    stuck: z.array(StuckRunSchema),
    unknown: z.array(UnknownOperationSchema),
    worklist: WorklistSchema,
    queues: z.array(OpsQueueSchema),
  })
  .meta({ id: 'OpsOverview' });
export type OpsOverview = z.infer<typeof OpsOverviewSchema>;

/** `GET /api/workflows/stuck`. */
export const StuckRunsSchema = z.object({ runs: z.array(StuckRunSchema) }).meta({ id: 'StuckRuns' });
/** `GET /api/operations/failed-unknown`. */
export const UnknownOperationsSchema = z.object({ operations: z.array(UnknownOperationSchema) }).meta({ id: 'UnknownOperations' });
/** `GET /api/queues`. */
export const OpsQueuesSchema = z.object({ queues: z.array(OpsQueueSchema) }).meta({ id: 'OpsQueues' });

/**
 * `POST /api/token-revocations` (and `gatehouse tokens revoke`): revoke a user's bearer tokens
 * (docs/decisions/0695-user-tokens-can-be-revoked.md). `subject`: the user (`sub`) whose tokens
 * die, a user of the directory; `jti`, when given: only that one token of theirs; `reason`: why
 * (kept in the ledger and the audit event).
 */
export const TokenRevocationRequestSchema = z
  .strictObject({
    subject: storableString().min(1).max(256),
    jti: storableString().min(1).max(256).optional(),
    reason: personText(500),
  })
  .meta({ id: 'TokenRevocationRequest' });
export type TokenRevocationRequest = z.infer<typeof TokenRevocationRequestSchema>;

/**
 * The answer of a revocation: `kind` `subject` with `notBefore` (ISO time; the subject's tokens
 * issued before it are refused) or `jti`; `changed` false when it was revoked already (a repeat).
 */
export const TokenRevocationResultSchema = z
  .object({
    kind: z.enum(['subject', 'jti']),
    subject: z.string(),
    notBefore: z.string().nullable(),
    jti: z.string().nullable(),
    changed: z.boolean(),
  })
  .meta({ id: 'TokenRevocationResult' });
export type TokenRevocationResult = z.infer<typeof TokenRevocationResultSchema>;

/**
 * The refusals of every operation, all behind the operator check: 401 without a valid token, 403
 * for a caller who is not an operator (audited) or a change sent with the cookie alone, and 429
 * once such a caller is past the sign-in limits (not audited; docs/decisions/0725).
 */
const refused = {
  '401': unauthorizedResponse(),
  '403': errorResponse('not_an_operator (audited), or a change sent with the dashboard cookie instead of a bearer token'),
  '429': errorResponse(
    'rate_limited_user or rate_limited_tenant: a caller who is not an operator, past the sign-in limits (SIGNIN_RATE_PER_USER, SIGNIN_RATE_PER_TENANT); the refusal is not audited; Retry-After in seconds (ADR 0725)',
  ),
};

/** One read-only JSON route of the dashboard: 200 `schema`, 400 on a bad query, 401/403/429 for anyone but an operator ({@link refused}). */
const opsGet = (operationId: string, summary: string, schema: z.ZodType, query: 'state' | 'limit' | false = 'state') => ({
  get: {
    operationId,
    summary,
    ...(query ? { requestParams: { query: query === 'state' ? OpsQuerySchema : OpsLimitQuerySchema } } : {}),
    responses: {
      '200': jsonResponse(summary, schema),
      ...(query
        ? {
            '400': errorResponse(
              query === 'state' ? 'invalid_query: state must be a workflow state and limit 1..500' : 'invalid_query: limit must be 1..500',
            ),
          }
        : {}),
      '401': refused['401'],
      '403': errorResponse('not_an_operator (audited)'),
      '429': refused['429'],
    },
  },
});

/** `GET /api/webhooks`: every registered endpoint, secrets never shown. */
export const WebhookEndpointsSchema = z.object({ webhooks: z.array(WebhookEndpointViewSchema) }).meta({ id: 'WebhookEndpoints' });
/** `GET /api/webhooks/deliveries`. */
export const WebhookDeliveriesSchema = z.object({ deliveries: z.array(WebhookDeliveryViewSchema) }).meta({ id: 'WebhookDeliveries' });

/** The webhook routes (docs/decisions/0250-pushed-workflow-events.md): changes need an operator's bearer token and are audited. */
const webhookPaths: ZodOpenApiObject['paths'] = {
  '/api/webhooks': {
    get: {
      operationId: 'listWebhooks',
      summary: 'every registered webhook endpoint (no secrets)',
      responses: { '200': jsonResponse('endpoints', WebhookEndpointsSchema), ...refused },
    },
    post: {
      operationId: 'registerWebhook',
      summary: "register a tenant's receiver; the signing secret is in this answer only",
      requestBody: { required: true, content: { 'application/json': { schema: WebhookRegistrationSchema } } },
      responses: {
        '201': jsonResponse('registered, with its secret', WebhookRegisteredSchema),
        '400': errorResponse('invalid_body, unknown_tenant or invalid_webhook_url'),
        '409': errorResponse(
          'webhook_already_registered: the tenant has an active endpoint of this URL (hosts compared in ASCII); too_many_webhooks: the tenant has WEBHOOK_MAX_ENDPOINTS_PER_TENANT active endpoints; disable one first',
        ),
        ...refused,
      },
    },
  },
  '/api/webhooks/{id}': {
    delete: {
      operationId: 'disableWebhook',
      summary: 'disable an endpoint; its pending deliveries end failed',
      requestParams: { path: z.object({ id: z.string() }) },
      responses: { '200': jsonResponse('the disabled endpoint', WebhookEndpointViewSchema), '404': errorResponse('not_found'), ...refused },
    },
  },
  '/api/webhooks/deliveries': {
    get: {
      operationId: 'listWebhookDeliveries',
      summary: 'webhook deliveries, newest first (status failed: those given up after their retries)',
      requestParams: { query: WebhookDeliveryQuerySchema },
      responses: { '200': jsonResponse('deliveries', WebhookDeliveriesSchema), '400': errorResponse('invalid_query'), ...refused },
    },
  },
};

/** Revocation of user tokens (docs/decisions/0695-user-tokens-can-be-revoked.md): an operator's bearer token, audited. */
const revocationPaths: ZodOpenApiObject['paths'] = {
  '/api/token-revocations': {
    post: {
      operationId: 'revokeUserTokens',
      summary: "revoke a user's bearer tokens: all issued before now, or one by its jti (idempotent, audited)",
      requestBody: { required: true, content: { 'application/json': { schema: TokenRevocationRequestSchema } } },
      responses: {
        '200': jsonResponse('revoked (changed: false when it was already)', TokenRevocationResultSchema),
        '400': errorResponse('invalid_revocation or unknown_user: nothing was revoked'),
        ...refused,
      },
    },
  },
};

const opsPaths: ZodOpenApiObject['paths'] = {
  ...webhookPaths,
  ...revocationPaths,
  ...commonPaths,
  '/api/overview': opsGet('getOverview', 'everything the /ops page shows', OpsOverviewSchema),
  '/api/workflows': opsGet('listWorkflows', 'workflow counts per state and the most recently updated', WorkflowOverviewSchema),
  '/api/workflows/stuck': opsGet('listStuckRuns', 'live runs past their no-progress bound', StuckRunsSchema, 'limit'),
  '/api/operations/failed-unknown': opsGet(
    'listUnknownOperations',
    'every failed_unknown operation, oldest first',
    UnknownOperationsSchema,
    'limit',
  ),
  '/api/reconciliation/worklist': opsGet('getWorklist', 'the open reconciliation worklist', WorklistSchema, 'limit'),
  '/api/queues': opsGet('listQueues', 'every queue of every release with job counts', OpsQueuesSchema, false),
};

/**
 * The ops dashboard's JSON API as an OpenAPI 3.1 document (served by the ops service at
 * `GET /openapi.json`; the HTML pages and bull-board under `/queues` are not part of it). For
 * operators only: a bearer token (or the sign-in cookie `gh_ops`). Every operation lists the
 * shared error answers too (`withSharedErrors`), checked against real answers by
 * test/contracts/openapi-error-statuses.test.ts.
 */
export function opsOpenApi(): OpenApiDocument {
  return createDocument({
    openapi: '3.1.0',
    info: {
      title: 'Gatehouse ops API',
      version: '1',
      description:
        'JSON twins of the ops dashboard, for operators (docs/decisions/0060-ops-dashboard.md), webhook endpoints and the revocation of user tokens.',
    },
    ...bearerSecurity,
    // The shared middleware's answers (503, 413/415 for a body, 400 bad_path for an {id}), as the other APIs list them.
    paths: withSharedErrors(opsPaths),
  });
}
