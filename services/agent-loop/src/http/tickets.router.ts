import { Router } from 'express';
import { randomUUID } from 'node:crypto';
import {
  TicketRequestSchema,
  turnsQueue,
  sha256Hex,
  type PackBudgets,
  type TicketAccepted,
  type TicketRequest,
} from '@gatehouse/contracts';
import {
  enqueueInTransaction,
  inTransaction,
  recordAudit,
  recordWorkflowEvent,
  actorHash,
  routeRelease,
  type Db,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import { ConflictError, Forbidden, parseBody, requesterPack, type OutboxRelay } from '@gatehouse/platform';
import type { Pack } from '@gatehouse/tools';
import type { AuthedRequest } from '@gatehouse/platform';
import { withSpan } from '@gatehouse/telemetry';

/** What one pack's workflows start with: its policy revision, catalog digest and budgets. */
export interface PackSettings {
  policyRevision: string;
  /** sha256 over the canonical JSON of the pack's tool contracts (recorded with every workflow). */
  catalogDigest: string;
  /** Budgets of the pack (release manifest, env overrides applied). */
  budgets: PackBudgets;
}

/** Settings the intake needs. */
export interface IntakeConfig {
  db: Db;
  relay: OutboxRelay;
  release: string;
  auditHmacKey: string;
  /** Per release a workflow may be routed to, per pack (docs/product/users-and-tools.md#tool-packs, docs/product/releases.md#canary). */
  packs: (releaseId: string) => Record<Pack, PackSettings>;
}

/**
 * `POST /v1/tickets` (docs/product/public-contract.md#intake): 202 `{workflowId}`; idempotent per tenant + ticketId (a repeat
 * by the same user with the same text returns the same workflow; other text, or another user of the tenant, is 409
 * `ticket_conflict`); 400 for
 * a body that fails its schema; 403 `not_a_requester` for a caller the directory does not know
 * as a representative or an engineer (an approver's or operator's token); 403 `pack_not_allowed`
 * for a `pack` the caller's role does not open (a representative opens support runs, an engineer
 * change runs: docs/decisions/0675). `pack` (`support` default, or `change`) picks the catalog,
 * policy bundle and budgets the workflow keeps for its whole life.
 */
export function ticketsRouter(cfg: IntakeConfig): Router {
  const router = Router();
  router.post('/v1/tickets', async (req, res) => {
    const { user } = req as unknown as AuthedRequest;
    const body = admitTicket(user, req.body);
    const result = await withSpan('intake ticket', { 'gatehouse.tenant': user.tenant }, () =>
      inTransaction(cfg.db, async (trx) => {
        // Canary: a candidate whose cohort names this user or tenant, else the active release.
        const releaseId = await routeRelease(trx, { id: user.sub, tenant: user.tenant }, cfg.release);
        const pack = cfg.packs(releaseId)[body.pack];
        const id = await insertWorkflow(trx, user, body, releaseId, pack);
        if (!id) return { workflowId: await repeatedTicket(trx, user, body), rows: [] };
        return { workflowId: id, rows: [await startRun(trx, cfg, user, body, { id, releaseId, pack })] };
      }),
    );
    await cfg.relay.publish(result.rows);
    const accepted: TicketAccepted = { workflowId: result.workflowId };
    res.status(202).json(accepted);
  });
  return router;
}

/** The authenticated caller of the intake, as the router reads it. */
type Requester = AuthedRequest['user'];

/**
 * The ticket `raw` of `user`, parsed, once the caller may submit it.
 * @throws Forbidden 403 `not_a_requester` (not a representative or engineer of the directory),
 *   UserError 400 (the body fails its schema), Forbidden 403 `pack_not_allowed` (another role's pack).
 */
function admitTicket(user: Requester, raw: unknown): TicketRequest {
  const ownPack = requesterPack(user);
  if (ownPack === undefined) {
    throw new Forbidden(
      'not_a_requester',
      'only a representative or an engineer of the directory submits tickets; approvers and operators act through their own surfaces',
    );
  }
  const body = parseBody(TicketRequestSchema, raw);
  if (body.pack !== ownPack) {
    throw new Forbidden(
      'pack_not_allowed',
      `your role submits ${ownPack}-pack tickets only: a representative opens support runs, an engineer change runs; send pack "${ownPack}" or ask a colleague of that role`,
    );
  }
  return body;
}

/** Inserts the ticket's workflow (`received`); its new id, or undefined when the tenant already has this ticket id. */
async function insertWorkflow(
  trx: Trx,
  user: Requester,
  body: TicketRequest,
  releaseId: string,
  pack: PackSettings,
): Promise<string | undefined> {
  const inserted = await trx
    .insertInto('workflows')
    .values({
      id: randomUUID(),
      tenant: user.tenant,
      ticket_id: body.ticketId,
      user_id: user.sub,
      pack: body.pack,
      mode: body.mode,
      text_sha256: sha256Hex(body.text),
      state: 'received',
      stop_reason: null,
      next_step: null,
      release_id: releaseId,
      policy_revision: pack.policyRevision,
      catalog_digest: pack.catalogDigest,
    })
    .onConflict((oc) => oc.columns(['tenant', 'ticket_id']).doNothing())
    .returning('id')
    .executeTakeFirst();
  return inserted?.id;
}

/**
 * A ticket id the tenant already submitted: the same workflow for the same user, text, mode and pack.
 * @throws ConflictError 409 `ticket_conflict` when another user of the tenant submitted it (only they
 *   may follow it up, docs/decisions/0661) or it came with other content.
 */
async function repeatedTicket(trx: Trx, user: Requester, body: TicketRequest): Promise<string> {
  const existing = await trx
    .selectFrom('workflows')
    .select(['id', 'text_sha256', 'mode', 'pack', 'user_id'])
    .where('tenant', '=', user.tenant)
    .where('ticket_id', '=', body.ticketId)
    .executeTakeFirstOrThrow();
  if (existing.user_id !== user.sub) {
    throw new ConflictError(
      'ticket_conflict',
      `ticket ${body.ticketId} was already submitted by another user of your tenant (workflow ${existing.id}); follow it with GET /v1/workflows/${existing.id}, or submit your request under another ticket id`,
    );
  }
  if (existing.text_sha256 !== sha256Hex(body.text) || existing.mode !== body.mode || existing.pack !== body.pack) {
    throw new ConflictError('ticket_conflict', `ticket ${body.ticketId} was already submitted with other content`);
  }
  return existing.id;
}

/**
 * What a new run starts with, in the intake's transaction: its budgets (the pack's), the rep's
 * message as round 0 of its transcript, the `run.started` audit event, its `received` workflow
 * event (seq 1, ADR 0250), and its first model round as an outbox row (returned).
 */
async function startRun(
  trx: Trx,
  cfg: IntakeConfig,
  user: Requester,
  body: TicketRequest,
  run: { id: string; releaseId: string; pack: PackSettings },
): Promise<OutboxRow> {
  const { id, releaseId, pack } = run;
  await trx
    .insertInto('budgets')
    .values({
      workflow_id: id,
      max_rounds: pack.budgets.maxRounds,
      max_tool_calls: pack.budgets.maxToolCalls,
      deadline_at: new Date(Date.now() + pack.budgets.wallTimeSeconds * 1000),
      max_spend_micro_usd: pack.budgets.maxSpendMicroUsd,
    })
    .execute();
  await trx
    .insertInto('conversation_items')
    .values({ workflow_id: id, round: 0, kind: 'user_message', call_id: null, item: JSON.stringify({ role: 'user', content: body.text }) })
    .execute();
  await recordAudit(trx, {
    type: 'run.started',
    service: 'agent-loop',
    runId: id,
    step: 0,
    actorHash: actorHash(cfg.auditHmacKey, user.sub),
    outcome: body.mode,
    revisions: { toolCatalog: pack.catalogDigest, policy: pack.policyRevision, release: releaseId },
  });
  await recordWorkflowEvent(trx, id, null);
  return enqueueInTransaction(trx, turnsQueue, { release: releaseId, workflowId: id, round: 1 });
}
