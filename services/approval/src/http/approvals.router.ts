import { Router, type Request } from 'express';
import { z } from 'zod';
import { DecisionRequestSchema } from '@gatehouse/contracts';
import type { UserClaims } from '@gatehouse/credentials';
import type { Db } from '@gatehouse/ledger';
import { parseBody, UserError, type OutboxRelay } from '@gatehouse/platform';
import { authorityRefusal } from '../domain/authority.ts';
import { decideApproval } from '../domain/decide.ts';
import { withSpan } from '@gatehouse/telemetry';

const caller = (req: Request): UserClaims => (req as unknown as { user: UserClaims }).user;
const ListQuery = z.object({ status: z.enum(['pending', 'approved', 'denied', 'expired', 'void', 'used']).default('pending') });
const Id = z.uuid();

/** Trusted fields only: normalized arguments in human units and authoritative facts, never model text. */
function present(a: Record<string, unknown> & { arguments: Record<string, unknown>; facts: Record<string, unknown> }) {
  const args = { ...a.arguments };
  if (typeof args.amountCents === 'number') args.amount = (args.amountCents / 100).toFixed(2);
  return {
    approvalId: a.id,
    workflowId: a.workflow_id,
    tool: a.tool,
    target: a.target,
    arguments: args,
    orderFacts: a.facts,
    requester: a.requester,
    ruleId: a.rule_id,
    actionVersion: a.action_version,
    actionDigest: a.action_digest,
    policyRevision: a.policy_revision,
    amountCents: a.amount_cents,
    status: a.status,
    expiresAt: new Date(a.expires_at as Date).toISOString(),
  };
}

/**
 * Approval API (SPEC §9): `GET /v1/approvals?status=pending` (the caller's tenant, filtered to
 * what the caller may decide when listing pending ones), `GET /v1/approvals/:id`, and
 * `POST /v1/approvals/:id/decision` → 200 | 403 | 409 | 410.
 */
export function approvalsRouter(cfg: { db: Db; relay: OutboxRelay; auditHmacKey: string }): Router {
  const router = Router();
  const base = () =>
    cfg.db
      .selectFrom('approvals as p')
      .innerJoin('actions as a', 'a.id', 'p.action_id')
      .select(['p.id', 'p.workflow_id', 'p.tool', 'a.target', 'a.arguments', 'a.facts', 'p.requester', 'p.rule_id', 'p.action_version', 'p.action_digest', 'p.policy_revision', 'p.amount_cents', 'p.status', 'p.expires_at', 'p.tenant', 'p.region']);

  router.get('/v1/approvals', async (req, res) => {
    const user = caller(req);
    const q = ListQuery.safeParse(req.query);
    if (!q.success) throw new UserError('invalid_query', 'status must be one of pending, approved, denied, expired, void, used');
    const rows = await base().where('p.tenant', '=', user.tenant).where('p.status', '=', q.data.status).orderBy('p.created_at').execute();
    const visible =
      q.data.status === 'pending'
        ? rows.filter((r) => authorityRefusal(user.sub, user.tenant, { tenant: r.tenant, region: r.region, requester: r.requester, amountCents: r.amount_cents }) === null)
        : rows;
    res.json({ approvals: visible.map((r) => present(r as never)) });
  });

  router.get('/v1/approvals/:id', async (req, res) => {
    const user = caller(req);
    const id = String(req.params.id);
    const row = Id.safeParse(id).success ? await base().where('p.id', '=', id).where('p.tenant', '=', user.tenant).executeTakeFirst() : undefined;
    if (!row) throw new UserError('not_found', 'no such approval', { status: 404 });
    const refusal = authorityRefusal(user.sub, user.tenant, { tenant: row.tenant, region: row.region, requester: row.requester, amountCents: row.amount_cents });
    res.json({ ...present(row as never), canDecide: refusal === null, refusal });
  });

  router.post('/v1/approvals/:id/decision', async (req, res) => {
    const user = caller(req);
    const id = String(req.params.id);
    if (!Id.safeParse(id).success) throw new UserError('not_found', 'no such approval', { status: 404 });
    const body = parseBody(DecisionRequestSchema, req.body);
    const outcome = await withSpan('approval decision', { 'gatehouse.decision': body.decision }, () => decideApproval(cfg.db, user, id, body, cfg.auditHmacKey));
    await cfg.relay.publish(outcome.rows);
    res.json({ approvalId: outcome.approvalId, status: outcome.status });
  });
  return router;
}
