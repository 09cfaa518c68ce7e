import { randomBytes } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { loadWorld, webhookUrlProblem, WebhookDeliveryQuerySchema, WebhookRegistrationSchema } from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, type Db } from '@gatehouse/ledger';
import { Forbidden, NotFound, parseBody, UserError } from '@gatehouse/platform';
import { operatorOf } from './operator-auth.ts';

const iso = (d: Date | string | null): string | null => (d === null ? null : new Date(d).toISOString());

/** A change needs the bearer header: the session cookie alone never registers or disables (no cross-site writes). */
function requireBearer(req: Request): void {
  if (!req.header('authorization')) throw new Forbidden('bearer_required', 'changing webhooks needs an operator bearer token');
}

/**
 * Webhook endpoints of tenants and their deliveries (docs/product/public-contract.md#webhooks,
 * docs/decisions/0250-pushed-workflow-events.md), for operators only (mounted behind the operator
 * check): `POST /api/webhooks` `{tenant, url}` registers and answers the signing secret once
 * (201); `DELETE /api/webhooks/:id` disables (no new deliveries); `GET /api/webhooks` lists
 * (without secrets); `GET /api/webhooks/deliveries?status=&tenant=&limit=` lists deliveries,
 * `failed` ones with their last error. Each change is audited (`ops.command`).
 */
export function webhooksRouter(cfg: { db: Db; auditHmacKey: string; production: boolean }): Router {
  const router = Router();
  const audit = (res: Response, outcome: string) =>
    inTransaction(cfg.db, (trx) =>
      recordAudit(trx, {
        type: 'ops.command',
        service: 'ops',
        runId: null,
        actorHash: actorHash(cfg.auditHmacKey, operatorOf(res).sub),
        outcome,
      }),
    );

  router.post('/api/webhooks', async (req, res) => {
    requireBearer(req);
    const body = parseBody(WebhookRegistrationSchema, req.body);
    if (!loadWorld().tenants.some((t) => t.id === body.tenant)) throw new UserError('unknown_tenant', `no tenant ${body.tenant}`);
    const problem = webhookUrlProblem(body.url, cfg.production);
    if (problem) throw new UserError('invalid_webhook_url', problem);
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const row = await cfg.db
      .insertInto('webhook_endpoints')
      .values({ tenant: body.tenant, url: body.url, secret, created_by: operatorOf(res).sub })
      .returningAll()
      .executeTakeFirstOrThrow();
    await audit(res, `webhook.registered:${row.id}:${row.tenant}`);
    res.status(201).json({ ...endpointView(row), secret });
  });

  router.delete('/api/webhooks/:id', async (req, res) => {
    requireBearer(req);
    const id = String(req.params.id);
    if (!/^[0-9a-f-]{36}$/.test(id)) throw new NotFound('not_found', 'no such webhook');
    const row = await cfg.db
      .updateTable('webhook_endpoints')
      .set({ disabled_at: new Date() })
      .where('id', '=', id)
      .where('disabled_at', 'is', null)
      .returningAll()
      .executeTakeFirst();
    if (!row) throw new NotFound('not_found', 'no such active webhook');
    await audit(res, `webhook.disabled:${row.id}:${row.tenant}`);
    res.json(endpointView(row));
  });

  router.get('/api/webhooks', async (_req, res) => {
    const rows = await cfg.db.selectFrom('webhook_endpoints').selectAll().orderBy('created_at').execute();
    res.json({ webhooks: rows.map(endpointView) });
  });

  router.get('/api/webhooks/deliveries', async (req, res) => {
    const q = WebhookDeliveryQuerySchema.safeParse(req.query);
    if (!q.success) throw new UserError('invalid_query', 'status must be pending, delivered or failed; limit 1..500');
    let sel = cfg.db.selectFrom('webhook_deliveries').selectAll().orderBy('created_at', 'desc').limit(q.data.limit);
    if (q.data.status) sel = sel.where('status', '=', q.data.status);
    if (q.data.tenant) sel = sel.where('tenant', '=', q.data.tenant);
    const rows = await sel.execute();
    res.json({
      deliveries: rows.map((d) => ({
        deliveryId: d.id,
        endpointId: d.endpoint_id,
        tenant: d.tenant,
        workflowId: d.workflow_id,
        seq: d.event_seq,
        status: d.status,
        attempts: d.attempts,
        lastError: d.last_error,
        nextAttemptAt: iso(d.next_attempt_at),
        createdAt: iso(d.created_at),
        finishedAt: iso(d.finished_at),
      })),
    });
  });
  return router;
}

function endpointView(row: {
  id: string;
  tenant: string;
  url: string;
  created_by: string;
  created_at: Date;
  disabled_at: Date | string | null;
}) {
  return {
    endpointId: row.id,
    tenant: row.tenant,
    url: row.url,
    createdBy: row.created_by,
    createdAt: iso(row.created_at),
    disabledAt: iso(row.disabled_at),
  };
}
