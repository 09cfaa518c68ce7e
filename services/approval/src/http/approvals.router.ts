import { Router, type Request } from 'express';
import { ApprovalListQuerySchema, DecisionRequestSchema, isUuid, MAX_APPROVAL_PAGE, type DecisionResult } from '@gatehouse/contracts';
import type { VerifiedUserClaims } from '@gatehouse/credentials';
import type { Db } from '@gatehouse/ledger';
import { NotFound, type OutboxRelay, parseBody, UserError } from '@gatehouse/platform';
import { withSpan } from '@gatehouse/telemetry';
import { decideApproval } from '../domain/decide.ts';
import { decodeCursor, listApprovalPage, selectApprovals, toView } from '../domain/approval-view.ts';

const caller = (req: Request): VerifiedUserClaims => (req as unknown as { user: VerifiedUserClaims }).user;
/** Largest page of `GET /v1/approvals` (docs/decisions/0182-approval-pagination.md). */
export const MAX_PAGE = MAX_APPROVAL_PAGE;

/**
 * Approval API (docs/product/public-contract.md#approvals): `GET /v1/approvals?status=pending&limit=&cursor=` (the caller's tenant; pending ones
 * filtered to what the caller may decide; pages of at most {@link MAX_PAGE} with an opaque `nextCursor`), `GET /v1/approvals/:id` (trusted fields only), and
 * `POST /v1/approvals/:id/decision` → 200 | 403 | 409 | 410 (200 `replayed: true` for the same approver's retry of a
 * decision already recorded, docs/decisions/0726-a-lost-decision-answer-is-replayed.md). Bodies, queries and answers are the
 * schemas of packages/contracts/src/api/approval.ts.
 */
export function approvalsRouter(cfg: { db: Db; relay: OutboxRelay; auditHmacKey: string }): Router {
  const router = Router();

  router.get('/v1/approvals', async (req, res) => {
    const user = caller(req);
    const q = ApprovalListQuerySchema.safeParse(req.query);
    if (!q.success)
      throw new UserError(
        'invalid_query',
        `status must be one of pending, approved, denied, expired, void, used; limit an integer 1–${MAX_PAGE}; cursor the nextCursor of a previous page`,
      );
    const after = q.data.cursor === undefined ? null : decodeCursor(q.data.cursor);
    if (after === undefined) throw new UserError('invalid_cursor', 'cursor is not a nextCursor this API issued');
    const page = await listApprovalPage(cfg.db, user, { status: q.data.status, limit: q.data.limit, after });
    if (!page) throw new UserError('invalid_cursor', 'cursor does not name an approval of your tenant');
    res.json(page);
  });

  router.get('/v1/approvals/:id', async (req, res) => {
    const user = caller(req);
    const id = String(req.params.id);
    const row = isUuid(id) ? await selectApprovals(cfg.db, user.tenant).where('p.id', '=', id).executeTakeFirst() : undefined;
    if (!row) throw new NotFound('not_found', 'no such approval');
    res.json(toView(row, user.sub));
  });

  router.post('/v1/approvals/:id/decision', async (req, res) => {
    const user = caller(req);
    const id = String(req.params.id);
    if (!isUuid(id)) throw new NotFound('not_found', 'no such approval');
    const body = parseBody(DecisionRequestSchema, req.body);
    const outcome = await withSpan('approval decision', { 'gatehouse.decision': body.decision }, () =>
      decideApproval(cfg.db, user, id, body, cfg.auditHmacKey),
    );
    await cfg.relay.publish(outcome.rows);
    // A retry of a recorded decision is answered as the first was, marked `replayed` (ADR 0726).
    const result: DecisionResult = {
      approvalId: outcome.approvalId,
      status: outcome.status,
      ...(outcome.replayed ? { replayed: true } : {}),
    };
    res.json(result);
  });
  return router;
}
