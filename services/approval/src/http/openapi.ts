import { z } from 'zod';
import { DecisionRequestSchema } from '@gatehouse/contracts';
import { ApprovalViewSchema } from '../domain/approval-view.ts';

const schema = (s: z.ZodType) => z.toJSONSchema(s, { target: 'draft-2020-12', io: 'output' });
const ErrorSchema = z.object({ error: z.object({ reason: z.string(), message: z.string() }) });
const err = (description: string) => ({ description, content: { 'application/json': { schema: schema(ErrorSchema) } } });

/**
 * The approval API's OpenAPI 3.1 document, generated from the same zod schemas that validate
 * requests and shape responses (served at `GET /openapi.json`).
 */
export function approvalOpenApi(): Record<string, unknown> {
  const view = schema(ApprovalViewSchema);
  return {
    openapi: '3.1.0',
    info: {
      title: 'Gatehouse approval API',
      version: '1',
      description: 'Approvals bound to one action version and digest (docs/product/public-contract.md#approvals).',
    },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
    security: [{ bearer: [] }],
    paths: {
      '/v1/approvals': {
        get: {
          summary: "List approvals of the caller's tenant (pending: only those the caller may decide)",
          parameters: [
            {
              name: 'status',
              in: 'query',
              schema: { type: 'string', enum: ['pending', 'approved', 'denied', 'expired', 'void', 'used'], default: 'pending' },
            },
            { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 100, default: 50 } },
            { name: 'cursor', in: 'query', description: 'the nextCursor of the previous page (opaque)', schema: { type: 'string' } },
          ],
          responses: {
            '200': {
              description: 'approvals',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: { approvals: { type: 'array', items: view }, nextCursor: { type: ['string', 'null'] } },
                    required: ['approvals', 'nextCursor'],
                  },
                },
              },
            },
            '400': err('invalid query (status, limit or cursor)'),
            '401': err('missing or invalid token'),
          },
        },
      },
      '/v1/approvals/{id}': {
        get: {
          summary: 'One approval, trusted fields only',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
          responses: {
            '200': { description: 'the approval', content: { 'application/json': { schema: view } } },
            '401': err('missing or invalid token'),
            '404': err('no such approval in your tenant'),
          },
        },
      },
      '/v1/approvals/{id}/decision': {
        post: {
          summary: 'Approve or deny exactly one action version',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
          requestBody: { required: true, content: { 'application/json': { schema: schema(DecisionRequestSchema) } } },
          responses: {
            '200': {
              description: 'decision recorded',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: { approvalId: { type: 'string' }, status: { type: 'string', enum: ['approved', 'denied'] } },
                  },
                },
              },
            },
            '400': err('body failed its schema'),
            '401': err('missing or invalid token'),
            '403': err('not authorized: requester, not a lead, other region, limit too low'),
            '404': err('no such approval in your tenant'),
            '409': err('stale version or digest mismatch'),
            '410': err('expired, already decided, used or void'),
          },
        },
      },
    },
  };
}
