import { Router } from 'express';
import { z } from 'zod';
import { NotFound, parseBody } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { ChangesRepository } from '../repositories/changes.repository.ts';
import {
  assertSameTenant,
  bindDelegation,
  readFencingToken,
  requireDelegation,
  requireIdempotencyKey,
  type DelegationVerifier,
  withEpochFence,
} from './delegation.guard.ts';
import { effectRoute, type EffectRouteDeps } from './effect.route.ts';
import { listingBody, pageOf, PageQuery, parseQuery } from './query.parser.ts';

/** Delegation audience of the change service (docs/product/policy-rules.md#delegated-credentials). */
export const CHANGES_AUDIENCE = 'changes';
/** Scope a delegated token needs to schedule a change. */
export const CHANGE_SCOPE = 'change:schedule';

/** Scope a delegated token needs to cancel a scheduled change (cancel-before-start). */
export const CHANGE_CANCEL_SCOPE = 'change:cancel';

/** Body of `POST /changes/operations/:operationKey/cancel`: why (1–240 characters). */
export const CancelBodySchema = z.object({ reason: z.string().min(1).max(240) }).strict();

/** Body of `POST /changes/operations` (docs/product/users-and-tools.md#change-pack: plan id pattern, window enum, note ≤ 240 or null). */
export const ScheduleBodySchema = z
  .object({
    planId: z.string().regex(/^plan_[a-z0-9]{16}$/),
    changeId: z.string().min(1).max(64),
    window: z.enum(['next-maintenance-window', 'manual-window']),
    note: z.string().max(240).nullable(),
  })
  .strict();

/**
 * The change service:
 * - `GET /changes/:id` → the change record `{id, tenant, environment, service, summary, risk}`; 404.
 * - `POST /changes/operations` (Bearer token, `Idempotency-Key` = operation key, optional
 *   `X-Fencing-Token`) → 201 `{operationKey, status: "scheduled", planId, changeId, window, note,
 *   tenant, requester, createdAt}`; 200 + `Idempotent-Replayed: true` for a replay; 400; 401;
 *   403 (delegation, `tenant_mismatch`); 404 `change_not_found`; 409 `idempotency_key_reuse`,
 *   `stale_fencing_token`.
 * - `POST /changes/operations/:operationKey/cancel` (Bearer token of scope `change:cancel`,
 *   `Idempotency-Key` = the cancel's key, `X-Fencing-Token`; body {@link CancelBodySchema}) →
 *   200 the operation, `status: "cancelled"` (+ `Idempotent-Replayed: true` for the same key
 *   again); 404 `operation_not_found`; 403 `tenant_mismatch`; 409 `window_started` (too late:
 *   cancel-before-start), `already_cancelled` (another key), `stale_fencing_token`.
 * - `POST /changes/operations/:operationKey/window-start` (synthetic clock, no token) → the
 *   operation with its window started now; 404.
 * - `GET /changes/operations/:operationKey` → the operation; 404 `operation_not_found`.
 * - `GET /changes/operations` → `{operations: [...]}`, every scheduled operation (reconciliation).
 * Every effect POST verifies its delegated token and its binding to the request first
 * (docs/decisions/0170-delegated-credentials-bind-the-operation.md): 403 `op_mismatch`,
 * `target_mismatch`, `fence_mismatch`, `token_replayed`; 409 `stale_fencing_token`; 503
 * `epoch_unavailable` — each before any effect; and writes its effect under the epoch fence
 * (ADR 0685): 403 `revoked_epoch` when an epoch bump committed since the token was verified.
 */
export function changesRouter(
  deps: EffectRouteDeps & {
    db: StagingDb;
    delegation: DelegationVerifier;
    changes: ChangesRepository;
  },
): Router {
  const router = Router();

  router.post(
    '/changes/operations',
    effectRoute(deps, 'changes', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: CHANGES_AUDIENCE, scope: CHANGE_SCOPE });
      const operationKey = requireIdempotencyKey(req);
      const headerFence = readFencingToken(req);
      const body = parseBody(ScheduleBodySchema, req.body);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey: operationKey,
        target: { planId: body.planId, changeId: body.changeId, window: body.window, note: body.note },
        headerFence,
      });
      const { operation, replayed } = await withEpochFence(
        deps,
        claims,
        async (trx) => {
          const change = await deps.changes.findChange(body.changeId, trx);
          if (!change) throw new NotFound('change_not_found', `no change ${body.changeId}`);
          assertSameTenant(claims, change.tenant);
          return deps.changes.schedule(trx, {
            operationKey,
            planId: body.planId,
            changeId: change.id,
            window: body.window,
            note: body.note,
            tenant: change.tenant,
            requester: claims.sub,
            actor: claims.act.sub,
            fencingToken: binding.fencingToken,
          });
        },
        binding.spend,
      );
      return replayed
        ? { status: 200, body: operation, headers: { 'Idempotent-Replayed': 'true' }, reason: 'idempotent_replay' }
        : { status: 201, body: operation };
    }),
  );

  router.post(
    '/changes/operations/:operationKey/cancel',
    effectRoute(deps, 'changes', async (req) => {
      const claims = await requireDelegation(req, deps.delegation, { audience: CHANGES_AUDIENCE, scope: CHANGE_CANCEL_SCOPE });
      const cancelKey = requireIdempotencyKey(req);
      const headerFence = readFencingToken(req);
      const body = parseBody(CancelBodySchema, req.body);
      const operationKey = String(req.params.operationKey);
      const binding = bindDelegation(deps.delegation, claims, {
        idempotencyKey: cancelKey,
        target: { operationKey },
        headerFence,
      });
      const { operation, replayed } = await withEpochFence(
        deps,
        claims,
        (trx) =>
          deps.changes.cancel(trx, {
            operationKey,
            cancelKey,
            reason: body.reason,
            tenant: claims.tenant,
            by: claims.sub,
            fencingToken: binding.fencingToken,
          }),
        binding.spend,
      );
      return replayed
        ? { status: 200, body: operation, headers: { 'Idempotent-Replayed': 'true' }, reason: 'idempotent_replay' }
        : { status: 200, body: operation };
    }),
  );

  router.post('/changes/operations/:operationKey/window-start', async (req, res) => {
    const operation = await deps.changes.startWindow(req.params.operationKey);
    if (!operation) throw new NotFound('operation_not_found', 'no operation with this key');
    res.json(operation);
  });

  router.get('/changes/operations', async (req, res) => {
    const page = pageOf(parseQuery(z.object(PageQuery), req.query));
    const operations = await deps.changes.listOperations(page);
    res.json(listingBody('operations', operations, page, (o) => o.operationKey));
  });

  router.get('/changes/operations/:operationKey', async (req, res) => {
    const operation = await deps.changes.findOperation(req.params.operationKey);
    if (!operation) throw new NotFound('operation_not_found', 'no operation with this key');
    res.json(operation);
  });

  router.get('/changes/:id', async (req, res) => {
    const change = await deps.changes.findChange(req.params.id);
    if (!change) throw new NotFound('change_not_found', `no change ${req.params.id}`);
    res.json(change);
  });

  return router;
}
