import { z } from 'zod';
import { createDocument, type ZodOpenApiObject } from 'zod-openapi';
import { storableString } from '../text.ts';
import {
  bearerSecurity,
  commonPaths,
  withSharedErrors,
  type OpenApiDocument,
  errorResponse,
  unauthorizedResponse,
  jsonResponse,
  queryLimit,
  UuidPathSchema,
} from './common.ts';

/** Approval states. */
export const ApprovalStatusSchema = z.enum(['pending', 'approved', 'denied', 'expired', 'void', 'used']);

/** `POST /v1/approvals/:id/decision` body (docs/product/public-contract.md#approvals). */
export const DecisionRequestSchema = z
  .strictObject({
    decision: z.enum(['approve', 'deny']),
    actionVersion: z.number().int().positive(),
    actionDigest: z.string().regex(/^[0-9a-f]{64}$/),
    reason: storableString().max(500).optional(),
  })
  .meta({ id: 'DecisionRequest' });
export type DecisionRequest = z.infer<typeof DecisionRequestSchema>;

/**
 * `200` of `POST /v1/approvals/:id/decision`; `replayed` when the same approver's same decision was
 * already recorded and this answers its retry (docs/decisions/0726-a-lost-decision-answer-is-replayed.md).
 */
export const DecisionResultSchema = z
  .object({
    approvalId: z.string(),
    status: z.enum(['approved', 'denied']),
    replayed: z
      .literal(true)
      .optional()
      .describe(
        'true when this approver already recorded this decision (same decision, version, digest and reason) and it still stands: the retry is answered as the first request was, and nothing is recorded again',
      ),
  })
  .meta({ id: 'DecisionResult' });
export type DecisionResult = z.infer<typeof DecisionResultSchema>;

/** Largest page of `GET /v1/approvals` (docs/decisions/0182-approval-pagination.md). */
export const MAX_APPROVAL_PAGE = 100;

/** Query of `GET /v1/approvals`: status, page size (1–{@link MAX_APPROVAL_PAGE}, default 50) and the opaque cursor of the previous page. */
export const ApprovalListQuerySchema = z.object({
  status: ApprovalStatusSchema.default('pending'),
  limit: queryLimit(MAX_APPROVAL_PAGE, 50),
  cursor: z.string().max(200).optional().describe('the nextCursor of the previous page (opaque)'),
});

/**
 * The trusted view of an approval that approvers see (API and inbox alike): tool, target,
 * normalized arguments in human units, the authoritative order facts the rule used, requester,
 * rule, version, digest, policy revision, expiry — built from the ledger, never from model text.
 * `canDecide`/`refusal`: whether the viewer may decide it, and if not, why: an authority refusal
 * (docs/product/policy-rules.md#approvals), or for a pending approval `expired` or `workflow_<state>` once its run ended.
 */
export const ApprovalViewSchema = z
  .object({
    approvalId: z.uuid(),
    workflowId: z.uuid(),
    tool: z.string(),
    target: z.string(),
    arguments: z.record(z.string(), z.unknown()).describe('normalized arguments; amounts also as `amount` in currency units'),
    orderFacts: z
      .record(z.string(), z.unknown())
      .describe('authoritative facts the rule used: the order (cents), or the change and plan with environment, effect and rollback'),
    requester: z.string(),
    tenant: z.string(),
    approverRole: z
      .string()
      .describe(
        'role that may decide: lead (support), change_owner (change), release_approver (a release override: a policy owner or an operator)',
      ),
    singleUse: z.literal(true).describe('an approval is consumed by exactly one execution'),
    ruleId: z.string(),
    actionVersion: z.number().int(),
    actionDigest: z.string(),
    policyRevision: z.string(),
    amountCents: z.number().int().nullable(),
    status: ApprovalStatusSchema,
    expiresAt: z.iso.datetime(),
    canDecide: z.boolean(),
    refusal: z.string().nullable(),
  })
  .meta({ id: 'ApprovalView' });
export type ApprovalView = z.infer<typeof ApprovalViewSchema>;

/** One page of `GET /v1/approvals`: the views and the cursor of the next page (null: the last page). */
export const ApprovalPageSchema = z
  .object({
    approvals: z.array(ApprovalViewSchema),
    nextCursor: z
      .string()
      .nullable()
      .describe(
        'the cursor of the next page, null on the last; a page may be short or empty and still carry one (one request examines at most 1000 approvals, ADR 0722): walk until null',
      ),
  })
  .meta({ id: 'ApprovalPage' });
export type ApprovalPage = z.infer<typeof ApprovalPageSchema>;

const approvalPaths: ZodOpenApiObject['paths'] = {
  ...commonPaths,
  '/v1/approvals': {
    get: {
      operationId: 'listApprovals',
      summary: "List approvals of the caller's tenant (pending: only those the caller may decide)",
      requestParams: { query: ApprovalListQuerySchema },
      responses: {
        '200': jsonResponse('a page of approvals', ApprovalPageSchema),
        '400': errorResponse('invalid query (status, limit or cursor)'),
        '401': unauthorizedResponse(),
      },
    },
  },
  '/v1/approvals/{id}': {
    get: {
      operationId: 'getApproval',
      summary: 'One approval, trusted fields only',
      requestParams: { path: UuidPathSchema },
      responses: {
        '200': jsonResponse('the approval', ApprovalViewSchema),
        '401': unauthorizedResponse(),
        '404': errorResponse('no such approval in your tenant'),
      },
    },
  },
  '/v1/approvals/{id}/decision': {
    post: {
      operationId: 'decideApproval',
      summary: 'Approve or deny exactly one action version',
      requestParams: { path: UuidPathSchema },
      requestBody: { required: true, content: { 'application/json': { schema: DecisionRequestSchema } } },
      responses: {
        '200': jsonResponse(
          'decision recorded, or (replayed) the same decision by the same approver recorded earlier',
          DecisionResultSchema,
        ),
        '400': errorResponse('body failed its schema'),
        '401': unauthorizedResponse(),
        '403': errorResponse('not authorized: requester, not a lead (change owner, release approver), other region, limit too low'),
        '404': errorResponse('no such approval in your tenant'),
        '409': errorResponse('stale version or digest mismatch'),
        '410': errorResponse('expired, already decided (but for a replay of the same decision by its approver), used or void'),
      },
    },
  },
};

/**
 * The approval API's OpenAPI 3.1 document (served by the approval service at `GET /openapi.json`),
 * generated from the zod schemas above that validate its requests and type its responses.
 */
export function approvalOpenApi(): OpenApiDocument {
  return createDocument({
    openapi: '3.1.0',
    info: {
      title: 'Gatehouse approval API',
      version: '1',
      description: 'Approvals bound to one action version and digest (docs/product/public-contract.md#approvals).',
    },
    ...bearerSecurity,
    paths: withSharedErrors(approvalPaths),
  });
}
