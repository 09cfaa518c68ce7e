import { z } from 'zod';
import { createDocument, type ZodOpenApiObject } from 'zod-openapi';
import { personText } from '../text.ts';
import {
  bearerSecurity,
  commonPaths,
  withSharedErrors,
  type OpenApiDocument,
  errorResponse,
  unauthorizedResponse,
  jsonResponse,
  UuidPathSchema,
} from './common.ts';
import { StreamClosedSchema, WorkflowEventSchema } from './events.ts';

/** `POST /v1/tickets` body (docs/product/public-contract.md#intake). Tenant and user come from the bearer token only. */
export const TicketRequestSchema = z
  .strictObject({
    ticketId: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9._:-]+$/),
    text: personText(8000),
    mode: z.enum(['investigate', 'act']).default('investigate'),
    pack: z.enum(['support', 'change']).default('support'),
  })
  .meta({ id: 'TicketRequest' });
export type TicketRequest = z.infer<typeof TicketRequestSchema>;

/** `202` of `POST /v1/tickets`: the workflow of this tenant's ticket (new, or the one already made for it). */
export const TicketAcceptedSchema = z.object({ workflowId: z.uuid() }).meta({ id: 'TicketAccepted' });
export type TicketAccepted = z.infer<typeof TicketAcceptedSchema>;

/** `POST /v1/workflows/:id/messages` body: the requester's follow-up text. */
export const WorkflowMessageRequestSchema = z.strictObject({ text: personText(8000) }).meta({ id: 'WorkflowMessage' });
export type WorkflowMessageRequest = z.infer<typeof WorkflowMessageRequestSchema>;

/**
 * An `Idempotency-Key` header of a follow-up: 1–255 visible ASCII characters, e.g. a UUID (the
 * form of the IETF httpapi draft's keys; docs/decisions/0510-follow-up-idempotency-key.md).
 */
export const IdempotencyKeySchema = z.string().regex(/^[\x21-\x7e]{1,255}$/);

/** `202` of `POST /v1/workflows/:id/messages`: the actions the follow-up superseded (each needs a new proposal and approval). */
export const WorkflowMessageAcceptedSchema = z
  .object({
    workflowId: z.uuid(),
    superseded: z.array(z.object({ version: z.number().int(), tool: z.string(), voidedApprovals: z.array(z.string()) })),
    /**
     * True when a follow-up with the same `Idempotency-Key` was already accepted: nothing was
     * added again, and `superseded` is what the first answer listed (docs/decisions/0510).
     */
    replayed: z.literal(true).optional(),
  })
  .meta({ id: 'WorkflowMessageAccepted' });
export type WorkflowMessageAccepted = z.infer<typeof WorkflowMessageAcceptedSchema>;

/** Workflow states (docs/product/states.md#workflow); the ledger's `WorkflowState` must stay assignable to it. */
/** Action states (docs/product/states.md#action); the ledger's `ActionStatus` is this list. */
export const ActionStatusSchema = z.enum([
  'proposed',
  'normalized',
  'pending_approval',
  'approved',
  'running',
  'succeeded',
  'failed',
  'failed_unknown',
  'denied',
  'suppressed',
  'superseded',
  'compensated',
]);

export const WorkflowStateSchema = z.enum([
  'received',
  'investigating',
  'awaiting_approval',
  'executing',
  'paused',
  'needs_reconciliation',
  'stopped',
  'completed',
]);

/** One action of a workflow as `GET /v1/workflows/:id` shows it (docs/product/public-contract.md#intake). */
export const WorkflowActionSchema = z
  .object({
    actionId: z.string(),
    callId: z.string().describe("the model's function call id"),
    tool: z.string(),
    target: z.string(),
    arguments: z.record(z.string(), z.unknown()).describe('normalized arguments'),
    version: z.number().int(),
    supersedesVersion: z.number().int().nullable(),
    digest: z.string(),
    decision: z.enum(['ALLOW', 'DENY', 'REQUIRE_APPROVAL']),
    ruleId: z.string(),
    policyRevision: z.string(),
    status: ActionStatusSchema.describe('docs/product/states.md#action'),
    operationKey: z
      .string()
      .describe(
        "the action's idempotency key at the systems of record, opaque (compare, never parse): " +
          'tk1-<sha256 of tenant and ticket id>:action:<version>, the same when the ticket is run again after the ledger lost its run; ' +
          'a run of a former release shows <workflowId>:action:<version> (docs/decisions/0789-operation-keys-from-the-ticket.md)',
      ),
  })
  .meta({ id: 'WorkflowAction' });

/** An approval of a workflow still pending or approved (not yet consumed). */
export const WorkflowApprovalSchema = z
  .object({
    approvalId: z.string(),
    actionId: z.string(),
    actionVersion: z.number().int(),
    actionDigest: z.string(),
    status: z.enum(['pending', 'approved']),
    ruleId: z.string(),
    expiresAt: z.iso.datetime(),
  })
  .meta({ id: 'WorkflowApproval' });

/**
 * `GET /v1/workflows/:id`: where the workflow stands — state, stop reason and next step, the
 * agent's last message, every action and the approvals still open (docs/product/public-contract.md#intake).
 */
export const WorkflowViewSchema = z
  .object({
    workflowId: z.uuid(),
    ticketId: z.string(),
    mode: z.enum(['investigate', 'act']),
    pack: z.enum(['support', 'change']),
    state: WorkflowStateSchema,
    stopReason: z.string().nullable().describe('docs/product/states.md#stop-reasons; null until it stops'),
    nextStep: z.string().nullable().describe('what a person should do next, once it has ended or waits'),
    finalMessage: z.string().nullable().describe("the agent's last message to the rep (model text: display as text)"),
    release: z.string(),
    policyRevision: z.string(),
    round: z.number().int(),
    actions: z.array(WorkflowActionSchema),
    pendingApprovals: z.array(WorkflowApprovalSchema),
  })
  .meta({ id: 'WorkflowView' });
export type WorkflowView = z.infer<typeof WorkflowViewSchema>;

/**
 * The `data:` of an event of `GET /v1/workflows/:id/events`: a `workflow.updated` event's is a
 * `WorkflowEvent`; the `stream.closed` event that ends a stream before the workflow's terminal
 * event (its token expired or was revoked) carries a `StreamClosed` (docs/product/public-contract.md#pushed-updates).
 */
const StreamEventDataSchema = z.union([WorkflowEventSchema.meta({ id: 'WorkflowEvent' }), StreamClosedSchema]);

const rateLimited = errorResponse('past the per-user or per-tenant limit (`Retry-After` header, seconds)');

/** The intake API's paths (agent-loop, port 7101), as zod-openapi path items. */
const intakePaths: ZodOpenApiObject['paths'] = {
  ...commonPaths,
  '/v1/tickets': {
    post: {
      operationId: 'submitTicket',
      summary: 'Submit a ticket; idempotent per tenant and ticketId (tenant and user from the token)',
      requestBody: { required: true, content: { 'application/json': { schema: TicketRequestSchema } } },
      responses: {
        '202': jsonResponse('accepted: the workflow of this ticket', TicketAcceptedSchema),
        '400': errorResponse('body failed its schema'),
        '401': unauthorizedResponse(),
        '403': errorResponse(
          "not_a_requester: the directory does not know the caller as a representative or an engineer; pack_not_allowed: the pack is not the one the caller's role opens (a representative: support; an engineer: change)",
        ),
        '409': errorResponse('ticket_conflict: the ticketId was already submitted with other content, or by another user of the tenant'),
        '429': rateLimited,
      },
    },
  },
  '/v1/workflows/{id}': {
    get: {
      operationId: 'getWorkflow',
      summary: "Where a workflow of the caller's tenant stands",
      requestParams: { path: UuidPathSchema },
      responses: {
        '200': jsonResponse('the workflow', WorkflowViewSchema),
        '401': unauthorizedResponse(),
        '404': errorResponse("no such workflow in the caller's tenant"),
      },
    },
  },
  '/v1/workflows/{id}/events': {
    get: {
      operationId: 'streamWorkflowEvents',
      summary:
        "Server-Sent Events of a workflow of the caller's tenant: each `workflow.updated` event's id is its seq; " +
        '`Last-Event-ID` (or `?lastEventId=`) replays the later ones; the stream ends after the terminal event, or at the ' +
        'bearer token\'s `exp` with a last `stream.closed` event whose data is `{"reason":"token_expired"}` (reconnect with a fresh token), ' +
        'or once the token is revoked with `{"reason":"token_revoked"}` (a new token is needed)',
      requestParams: {
        path: UuidPathSchema,
        query: z.object({ lastEventId: z.string().optional() }),
        header: z.object({ 'last-event-id': z.string().optional() }),
      },
      responses: {
        '200': {
          description:
            'text/event-stream; the data of a `workflow.updated` event is one WorkflowEvent, of the last `stream.closed` event (no id) one StreamClosed',
          content: { 'text/event-stream': { schema: StreamEventDataSchema } },
        },
        '204': { description: 'the workflow ended and nothing is newer than Last-Event-ID: stop reconnecting' },
        '400': errorResponse('bad_last_event_id'),
        '401': unauthorizedResponse(),
        '404': errorResponse("no such workflow in the caller's tenant"),
        '429': errorResponse(
          'too_many_streams_user or too_many_streams_tenant: open streams past the per-user or per-tenant limit of this server; Retry-After in seconds',
        ),
      },
    },
  },
  '/v1/workflows/{id}/messages': {
    post: {
      operationId: 'addWorkflowMessage',
      summary: "The requester's follow-up: unclaimed actions are superseded, the model gets another turn",
      description:
        'With an `Idempotency-Key` header (1–255 visible ASCII characters, e.g. a UUID), a retry of an accepted follow-up adds nothing and is answered 202 with `replayed: true`',
      requestParams: {
        path: UuidPathSchema,
        header: z.object({ 'idempotency-key': IdempotencyKeySchema.optional() }),
      },
      requestBody: { required: true, content: { 'application/json': { schema: WorkflowMessageRequestSchema } } },
      responses: {
        '202': jsonResponse('accepted', WorkflowMessageAcceptedSchema),
        '400': errorResponse('invalid_body or invalid_idempotency_key'),
        '401': unauthorizedResponse(),
        '403': errorResponse(
          'not_the_requester: the caller did not submit this ticket; not_a_requester: the run is one an operator command made (a change cancel, a remediation, a release override) and takes no follow-up',
        ),
        '404': errorResponse("no such workflow in the caller's tenant"),
        '409': errorResponse('workflow_not_running, or idempotency_key_reused (the key came with another text)'),
        '429': rateLimited,
      },
    },
  },
};

/**
 * The intake API's OpenAPI 3.1 document (served by the agent-loop at `GET /openapi.json`),
 * generated from the zod schemas above that validate its requests and type its responses.
 */
export function intakeOpenApi(): OpenApiDocument {
  return createDocument({
    openapi: '3.1.0',
    info: {
      title: 'Gatehouse intake API',
      version: '1',
      description: 'Tickets and the workflows they start (docs/product/public-contract.md#intake).',
    },
    ...bearerSecurity,
    paths: withSharedErrors(intakePaths),
  });
}
