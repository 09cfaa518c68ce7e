import { z } from 'zod';
import { storableString } from './text.ts';

/** `POST /v1/tickets` body (docs/product/public-contract.md#intake). Tenant and user come from the bearer token only. */
export const TicketRequestSchema = z.strictObject({
  ticketId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._:-]+$/),
  text: storableString().min(1).max(8000),
  mode: z.enum(['investigate', 'act']).default('investigate'),
  pack: z.enum(['support', 'change']).default('support'),
});
export type TicketRequest = z.infer<typeof TicketRequestSchema>;

/** `POST /v1/approvals/:id/decision` body (docs/product/public-contract.md#approvals). */
export const DecisionRequestSchema = z.strictObject({
  decision: z.enum(['approve', 'deny']),
  actionVersion: z.number().int().positive(),
  actionDigest: z.string().regex(/^[0-9a-f]{64}$/),
  reason: storableString().max(500).optional(),
});
export type DecisionRequest = z.infer<typeof DecisionRequestSchema>;
