import { randomBytes } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import {
  isUuid,
  loadWorld,
  normalizedWebhookUrl,
  shownWebhookUrl,
  testFaults,
  webhookUrlProblem,
  WEBHOOK_ENDPOINT_DISABLED,
  WebhookDeliveryQuerySchema,
  WebhookRegistrationSchema,
} from '@gatehouse/contracts';
import { actorHash, inTransaction, recordAudit, takeAdvisoryLocks, type Db, type Trx } from '@gatehouse/ledger';
import { ConflictError, Forbidden, NotFound, parseBody, sealWebhookSecret, UserError, type WebhookSecretKey } from '@gatehouse/platform';
import { operatorOf } from './operator-auth.ts';

const iso = (d: Date | string | null): string | null => (d === null ? null : new Date(d).toISOString());

/** A change needs the bearer header: the session cookie alone never registers or disables (no cross-site writes). */
function requireBearer(req: Request): void {
  if (!req.header('authorization')) throw new Forbidden('bearer_required', 'changing webhooks needs an operator bearer token');
}

/** Active webhook endpoints a tenant may have unless `WEBHOOK_MAX_ENDPOINTS_PER_TENANT` says otherwise. */
export const DEFAULT_MAX_WEBHOOKS_PER_TENANT = 10;

/** The advisory lock key that serializes registrations of one tenant's webhook endpoints. */
const endpointsLockKey = (tenant: string): string => `webhook-endpoints:${tenant}`;

/**
 * Webhook endpoints of tenants and their deliveries (docs/product/public-contract.md#webhooks,
 * docs/decisions/0250-pushed-workflow-events.md), for operators only (mounted behind the operator
 * check): `POST /api/webhooks` `{tenant, url}` registers the URL in its normalised form
 * ({@link normalizedWebhookUrl}: an internationalized host in ASCII) and answers the signing secret once
 * (201; the row keeps it sealed, ADR 0550), or 409 `webhook_already_registered` when the tenant already has an active
 * endpoint of that URL, or 409 `too_many_webhooks` when it already has `maxPerTenant` active endpoints
 * (nothing written either way); `DELETE /api/webhooks/:id` disables (no new deliveries; the pending ones end `failed`); `GET /api/webhooks`
 * lists (without secrets). Every answer shows a URL without its query ({@link shownWebhookUrl}, ADR 0727); `GET /api/webhooks/deliveries?status=&tenant=&limit=` lists
 * deliveries, `failed` ones with their last error. Each change is audited (`ops.command`) in the
 * transaction that makes it. `GATEHOUSE_TEST_DISABLE_WEBHOOK_CAP_LOCK=1` counts without the
 * tenant's lock (the control-removed test only).
 */
export function webhooksRouter(cfg: WebhooksConfig): Router {
  const router = Router();
  router.post('/api/webhooks', (req, res) => registerWebhook(cfg, req, res));
  router.delete('/api/webhooks/:id', (req, res) => disableWebhook(cfg, req, res));
  router.get('/api/webhooks', async (_req, res) => {
    const rows = await cfg.db.selectFrom('webhook_endpoints').selectAll().orderBy('created_at').execute();
    res.json({ webhooks: rows.map(endpointView) });
  });
  router.get('/api/webhooks/deliveries', (req, res) => listDeliveries(cfg.db, req, res));
  return router;
}

/** Settings of {@link webhooksRouter}. */
export interface WebhooksConfig {
  db: Db;
  auditHmacKey: string;
  production: boolean;
  maxPerTenant: number;
  /** Seals the signing secret before it is stored (ADR 0550). */
  secretKey: WebhookSecretKey;
}

/** Records the operator's change `outcome` (`ops.command`, the operator's id hashed) in `trx`. */
function auditChange(trx: Trx, cfg: WebhooksConfig, res: Response, outcome: string) {
  return recordAudit(trx, {
    type: 'ops.command',
    service: 'ops',
    runId: null,
    actorHash: actorHash(cfg.auditHmacKey, operatorOf(res).sub),
    outcome,
  });
}

/**
 * `POST /api/webhooks` `{tenant, url}`: registers the normalised URL under the tenant's lock and
 * answers 201 with the endpoint and its signing secret (shown once; stored sealed).
 * @throws Forbidden without a bearer header; UserError for a bad body, an unknown tenant or a URL
 *   webhookUrlProblem refuses; ConflictError for a URL already registered or a tenant at its cap.
 */
async function registerWebhook(cfg: WebhooksConfig, req: Request, res: Response): Promise<void> {
  requireBearer(req);
  const body = parseBody(WebhookRegistrationSchema, req.body);
  if (!loadWorld().tenants.some((t) => t.id === body.tenant)) throw new UserError('unknown_tenant', `no tenant ${body.tenant}`);
  const problem = webhookUrlProblem(body.url, cfg.production);
  if (problem) throw new UserError('invalid_webhook_url', problem);
  const url = normalizedWebhookUrl(body.url);
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const row = await inTransaction(cfg.db, async (trx) => {
    // Registrations of one tenant wait on each other here, so two at the limit cannot both pass the count.
    if (!testFaults().disableWebhookCapLock) await takeAdvisoryLocks(trx, [endpointsLockKey(body.tenant)]);
    await refuseSameUrl(trx, body.tenant, url);
    await refuseOverCap(trx, body.tenant, cfg.maxPerTenant);
    const created = await trx
      .insertInto('webhook_endpoints')
      .values({
        tenant: body.tenant,
        url,
        secret: sealWebhookSecret(secret, cfg.secretKey, { tenant: body.tenant, url }),
        created_by: operatorOf(res).sub,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    await auditChange(trx, cfg, res, `webhook.registered:${created.id}:${created.tenant}`);
    return created;
  });
  res.status(201).json({ ...endpointView(row), secret });
}

/**
 * 409 `too_many_webhooks` when `tenant` already has `maxPerTenant` active endpoints.
 * @throws ConflictError naming the count and the limit.
 */
async function refuseOverCap(trx: Trx, tenant: string, maxPerTenant: number): Promise<void> {
  const { active } = await trx
    .selectFrom('webhook_endpoints')
    .select((eb) => eb.fn.countAll<string>().as('active'))
    .where('tenant', '=', tenant)
    .where('disabled_at', 'is', null)
    .executeTakeFirstOrThrow();
  if (Number(active) >= maxPerTenant)
    throw new ConflictError(
      'too_many_webhooks',
      `tenant ${tenant} already has ${active} active webhook endpoints (limit ${maxPerTenant}); disable one first (DELETE /api/webhooks/:id)`,
    );
}

/**
 * Marks every pending delivery of the endpoint `endpointId` `failed` (`endpoint disabled`) in
 * `trx`, as its disabling does (docs/product/public-contract.md#webhooks). An attempt already in
 * flight still records its own outcome: a 2xx marks the delivery delivered.
 */
async function failPendingDeliveries(trx: Trx, endpointId: string): Promise<void> {
  await trx
    .updateTable('webhook_deliveries')
    .set({ status: 'failed', finished_at: new Date(), last_error: WEBHOOK_ENDPOINT_DISABLED })
    .where('endpoint_id', '=', endpointId)
    .where('status', '=', 'pending')
    .execute();
}

/**
 * `DELETE /api/webhooks/:id`: disables an active endpoint (no new deliveries) and marks its
 * pending deliveries `failed` in the same transaction, audited, and answers it.
 * @throws Forbidden without a bearer header; NotFound for an id that is no UUID or no active endpoint.
 */
async function disableWebhook(cfg: WebhooksConfig, req: Request, res: Response): Promise<void> {
  requireBearer(req);
  const id = String(req.params.id);
  if (!isUuid(id)) throw new NotFound('not_found', 'no such webhook');
  const row = await inTransaction(cfg.db, async (trx) => {
    const disabled = await trx
      .updateTable('webhook_endpoints')
      .set({ disabled_at: new Date() })
      .where('id', '=', id)
      .where('disabled_at', 'is', null)
      .returningAll()
      .executeTakeFirst();
    if (!disabled) return undefined;
    await failPendingDeliveries(trx, disabled.id);
    await auditChange(trx, cfg, res, `webhook.disabled:${disabled.id}:${disabled.tenant}`);
    return disabled;
  });
  if (!row) throw new NotFound('not_found', 'no such active webhook');
  res.json(endpointView(row));
}

/**
 * `GET /api/webhooks/deliveries?status=&tenant=&limit=`: the newest deliveries first, `failed`
 * ones with their last error.
 * @throws UserError(`invalid_query`) for a status, tenant or limit the query schema refuses, each named in `details`.
 */
async function listDeliveries(db: Db, req: Request, res: Response): Promise<void> {
  const q = WebhookDeliveryQuerySchema.safeParse(req.query);
  if (!q.success)
    throw new UserError('invalid_query', 'status must be pending, delivered or failed; tenant 1..64 storable characters; limit 1..500', {
      details: q.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  let sel = db.selectFrom('webhook_deliveries').selectAll().orderBy('created_at', 'desc').limit(q.data.limit);
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
}

/**
 * 409 `webhook_already_registered` when `tenant` has an active endpoint of `url` (normalised,
 * {@link normalizedWebhookUrl}; rows stored before normalisation are compared in that form too):
 * one subscription per receiver, whatever spelling of its host was sent (ADR 0727). Reads at most
 * the tenant's active endpoints (capped), under the tenant's registration lock.
 * @throws ConflictError naming the endpoint already registered.
 */
async function refuseSameUrl(trx: Trx, tenant: string, url: string): Promise<void> {
  const active = await trx
    .selectFrom('webhook_endpoints')
    .select(['id', 'url'])
    .where('tenant', '=', tenant)
    .where('disabled_at', 'is', null)
    .execute();
  const same = active.find((e) => URL.canParse(e.url) && normalizedWebhookUrl(e.url) === url);
  if (same)
    throw new ConflictError(
      'webhook_already_registered',
      `tenant ${tenant} already has an active endpoint ${same.id} for this URL; disable it first (DELETE /api/webhooks/${same.id}) to register it again`,
    );
}

/** An endpoint as every answer shows it: no secret, the URL without its query ({@link shownWebhookUrl}). */
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
    url: shownWebhookUrl(row.url),
    createdBy: row.created_by,
    createdAt: iso(row.created_at),
    disabledAt: iso(row.disabled_at),
  };
}
