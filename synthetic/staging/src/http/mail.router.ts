import { Router } from 'express';
import { z } from 'zod';
import { parseBody, SystemError } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import { MAIL_TEMPLATES, type MessagesRepository } from '../repositories/messages.repository.ts';
import type { OrdersRepository } from '../repositories/orders.repository.ts';
import {
  orderOfTenant,
  bindDelegation,
  readFencingToken,
  requireDelegation,
  type DelegationVerifier,
  withEpochFence,
} from './delegation.guard.ts';
import { effectRoute, type EffectRouteDeps } from './effect.route.ts';
import { listingBody, PageQuery, pageOf, parseQuery, SinceQuery } from './query.parser.ts';

/** Delegation audience of the mail service (docs/product/policy-rules.md#delegated-credentials). */
export const MAIL_AUDIENCE = 'mail';
/** Scope a delegated token needs to send mail. */
export const MAIL_SCOPE = 'mail:send';

/**
 * Body of `POST /mail/messages`. Strict: a recipient in the body is refused, because the
 * recipient is derived from the order, never from arguments (docs/product/users-and-tools.md#support-pack, `notify_customer`).
 */
export const MailBodySchema = z.object({ orderId: z.string().min(1).max(64), template: z.enum(MAIL_TEMPLATES) }).strict();

/** `GET /mail/messages`: one order's messages, or (without `orderId`) a time window's, optionally a page. */
const ListQuerySchema = z
  .object({ orderId: z.string().min(1).max(64).optional(), since: SinceQuery.optional(), ...PageQuery })
  .refine((q) => (q.orderId === undefined) !== (q.since === undefined), 'exactly one of orderId and since');

/**
 * The mail service (no dedupe):
 * - `POST /mail/messages` (Bearer token) body `{orderId, template}` → 201
 *   `{messageId, orderId, template, to, createdAt}`, `to` = the order's customer email;
 *   400 invalid body; 401 no or invalid token; 403 wrong audience/scope/epoch or
 *   `tenant_mismatch`; 404 `order_not_found`; 503 `recipient_unknown`.
 * - `GET /mail/messages?orderId=…` → `{messages: [...]}` (read-back).
 * - `GET /mail/messages?since=<ISO 8601>` → `{messages: [{messageId, orderId, tenant, template, to,
 *   createdAt}]}`: every message sent at or after `since`, about any order (read-back by time
 *   window, ADR 0791); one page by message id with `?limit=1..1000[&after=<messageId>]` →
 *   `{messages, next}`. 400 `invalid_query` with neither or both of `orderId` and `since`, or an
 *   unreadable `since`.
 * Every effect POST verifies its delegated token and its binding to the request first
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): 403 `op_mismatch`,
 * `target_mismatch`, `fence_mismatch`, `token_replayed`; 409 `stale_fencing_token`; 503
 * `epoch_unavailable` — each before any effect; and writes its effect under the epoch fence
 * (ADR 0685): 403 `revoked_epoch` when an epoch bump committed since the token was verified.
 */
export function mailRouter(
  deps: EffectRouteDeps & {
    db: StagingDb;
    delegation: DelegationVerifier;
    orders: OrdersRepository;
    messages: MessagesRepository;
  },
): Router {
  const router = Router();

  router.post(
    '/mail/messages',
    effectRoute(deps, 'mail', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: MAIL_AUDIENCE, scope: MAIL_SCOPE });
      const body = parseBody(MailBodySchema, req.body);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey: null,
        target: { orderId: body.orderId, template: body.template },
        headerFence: readFencingToken(req),
      });
      const message = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const order = await orderOfTenant(deps.orders, claims, body.orderId, trx);
          const recipient = await deps.orders.customerEmail(order.customer, trx);
          if (!recipient) throw new SystemError('recipient_unknown', `order ${order.id} has no customer address on record`);
          return deps.messages.create(trx, {
            orderId: order.id,
            tenant: order.tenant,
            template: body.template,
            recipient,
            requester: claims.sub,
            actor: claims.act.sub,
          });
        },
        binding.spend,
      );
      return { status: 201, body: message };
    }),
  );

  router.get('/mail/messages', async (req, res) => {
    const q = parseQuery(ListQuerySchema, req.query);
    if (q.orderId !== undefined) return void res.json({ messages: await deps.messages.listByOrder(q.orderId) });
    const page = pageOf(q);
    const rows = await deps.messages.listSince(new Date(q.since!), page);
    res.json(listingBody('messages', rows, page, (r) => r.messageId));
  });

  return router;
}
