import type { Selectable } from 'kysely';
import { Router } from 'express';
import {
  IdempotencyKeySchema,
  isUuid,
  WorkflowMessageRequestSchema,
  type WorkflowMessageAccepted,
  type WorkflowView,
} from '@gatehouse/contracts';
import {
  creditWaitsEndedByFollowUp,
  endUnclaimedActions,
  inTransaction,
  LIVE_STATES,
  readActionsView,
  releaseHold,
  shownNextStep,
  type Db,
  type OutboxRow,
  type Trx,
  type WorkflowsTable,
} from '@gatehouse/ledger';
import { ConflictError, Forbidden, NotFound, type OutboxRelay, parseBody, requesterPack, UserError } from '@gatehouse/platform';
import type { AuthedRequest } from '@gatehouse/platform';
import { startNextRound, unscheduledPlan } from '../domain/next-turn.ts';
import { unansweredCalls } from '../domain/transcript.ts';

/** Loads a workflow of the caller's tenant; another tenant's id is indistinguishable from none. */
export async function ownWorkflow(db: Db, id: string, tenant: string) {
  if (!isUuid(id)) throw new NotFound('not_found', 'no such workflow');
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', id).where('tenant', '=', tenant).executeTakeFirst();
  if (!wf) throw new NotFound('not_found', 'no such workflow');
  return wf;
}

/**
 * A follow-up comes from a requester — a representative or an engineer, the roles the intake takes
 * a ticket from (ADR 0675). The only runs whose user is another role are the out-of-band runs an
 * operator's command writes (a change cancel, a remediation, a release override): they wait on an
 * approval and have no model conversation, so a follow-up there would void the request's approval
 * and start a model round under an operator's identity
 * (docs/decisions/0757-an-out-of-band-ticket-id-is-no-intake-ticket-id.md).
 * @throws Forbidden 403 `not_a_requester`, before anything changes.
 */
function refuseOutOfBandFollowUp(user: AuthedRequest['user']): void {
  if (requesterPack(user) !== undefined) return;
  throw new Forbidden(
    'not_a_requester',
    'only a representative or an engineer adds a follow-up to their ticket; a request an operator command made (a change cancel, a remediation, a release override) is decided in the approval inbox and run again with its command',
  );
}

/**
 * The follow-up's `Idempotency-Key` header, or null without one.
 * @throws UserError 400 `invalid_idempotency_key` when it is empty, too long or not visible ASCII.
 */
function idempotencyKeyOf(header: string | undefined): string | null {
  if (header === undefined) return null;
  if (!IdempotencyKeySchema.safeParse(header).success) {
    throw new UserError('invalid_idempotency_key', 'Idempotency-Key must be 1–255 visible ASCII characters (for example a UUID)');
  }
  return header;
}

/**
 * The follow-up the run `workflowId` already holds under `key` (docs/decisions/0510): for the same
 * text, the `superseded` list its first `202` answered (stored with it; `[]` for a follow-up added
 * before that list was kept), which the retry is answered with — nothing is added again. Null
 * when the run holds no follow-up under `key`.
 * @throws ConflictError 409 `idempotency_key_reused` when that key came with another text.
 */
async function alreadyAdded(
  trx: Trx,
  workflowId: string,
  key: string,
  text: string,
): Promise<WorkflowMessageAccepted['superseded'] | null> {
  const earlier = await trx
    .selectFrom('conversation_items')
    .select(['item', 'follow_up_superseded'])
    .where('workflow_id', '=', workflowId)
    .where('kind', '=', 'user_message')
    .where('idempotency_key', '=', key)
    .executeTakeFirst();
  if (!earlier) return null;
  if (earlier.item.content !== text) {
    throw new ConflictError('idempotency_key_reused', 'this Idempotency-Key was sent with another message on this workflow; use a new key');
  }
  return earlier.follow_up_superseded ?? [];
}

/**
 * `GET /v1/workflows/:id` (state, actions, pending approvals, terminal reason and next step; its
 * shape is `WorkflowViewSchema` of packages/contracts/src/api/intake.ts)
 * and `POST /v1/workflows/:id/messages` (the requester's own follow-up — anyone else of the
 * tenant gets 403 `not_the_requester`; unclaimed actions are superseded first, docs/product/public-contract.md#follow-up-messages;
 * with an `Idempotency-Key` header a retry is answered `replayed: true` with the first answer's
 * `superseded` list, and adds nothing). The rep
 * may read only their tenant's workflows (404 otherwise).
 */
export function workflowsRouter(cfg: { db: Db; relay: OutboxRelay }): Router {
  const router = Router();
  router.get('/v1/workflows/:id', async (req, res) => {
    const { user } = req as unknown as AuthedRequest;
    const wf = await ownWorkflow(cfg.db, String(req.params.id), user.tenant);
    res.json(await workflowView(cfg.db, wf));
  });

  router.post('/v1/workflows/:id/messages', async (req, res) => {
    const { user } = req as unknown as AuthedRequest;
    const body = parseBody(WorkflowMessageRequestSchema, req.body);
    const wf0 = await ownWorkflow(cfg.db, String(req.params.id), user.tenant);
    // The follow-up is the requester's own (docs/product/public-contract.md#follow-up-messages): the run acts under their delegation, so
    // anyone else of the tenant — a lead who could then approve it, a rep without the scope — is
    // refused before anything changes.
    if (wf0.user_id !== user.sub) {
      throw new Forbidden('not_the_requester', 'only the user who submitted this ticket can add a follow-up to it');
    }
    refuseOutOfBandFollowUp(user);
    const key = idempotencyKeyOf(req.get('idempotency-key'));
    const added = await inTransaction(cfg.db, (trx) => addFollowUp(trx, wf0.id, key, body.text));
    await cfg.relay.publish(added.rows);
    // The rep sees what the follow-up voided: each needs a new proposal and a new approval.
    const accepted: WorkflowMessageAccepted = {
      workflowId: wf0.id,
      superseded: added.superseded,
      ...(added.replayed ? { replayed: true } : {}),
    };
    res.status(202).json(accepted);
  });
  return router;
}

/**
 * `GET /v1/workflows/:id`'s body for the run `wf` (`WorkflowViewSchema`): its state, actions,
 * pending approvals, last assistant message and the next step shown (a live run of a draining
 * release says it is held).
 */
async function workflowView(db: Db, wf: Selectable<WorkflowsTable>): Promise<WorkflowView> {
  const { actions, pendingApprovals } = await readActionsView(db, wf.id);
  const last = await db
    .selectFrom('conversation_items')
    .select('item')
    .where('workflow_id', '=', wf.id)
    .where('kind', '=', 'assistant_message')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  return {
    workflowId: wf.id,
    ticketId: wf.ticket_id,
    mode: wf.mode,
    pack: wf.pack,
    state: wf.state,
    stopReason: wf.stop_reason,
    // A live run of a draining release is held: say so (the release's mark, not the run, holds it).
    nextStep: shownNextStep(wf, LIVE_STATES.includes(wf.state) ? await releaseHold(db, wf.release_id) : null),
    finalMessage: typeof last?.item.content === 'string' ? last.item.content : null,
    release: wf.release_id,
    policyRevision: wf.policy_revision,
    round: wf.round,
    actions,
    pendingApprovals,
  };
}

/**
 * Adds the requester's follow-up `text` to the run `workflowId` in `trx`, under the run's row
 * lock: a retry under the same `key` is answered what the first was (`replayed`, nothing added,
 * even once the run ended); otherwise the run must be live, the waits it ends are credited
 * (ADR 0676), its unclaimed actions are superseded, the message is recorded with its key and the
 * answer it gets (ADR 0510), and the next round starts. Returns the outbox rows to publish.
 * @throws ConflictError 409 `workflow_not_running` for an ended run; `idempotency_key_reused`
 *   when `key` came with another text.
 */
async function addFollowUp(
  trx: Trx,
  workflowId: string,
  key: string | null,
  text: string,
): Promise<{ rows: OutboxRow[]; superseded: WorkflowMessageAccepted['superseded']; replayed: boolean }> {
  const wf = await trx.selectFrom('workflows').selectAll().where('id', '=', workflowId).forUpdate().executeTakeFirstOrThrow();
  const earlier = key === null ? null : await alreadyAdded(trx, wf.id, key, text);
  if (earlier) return { rows: [], superseded: earlier, replayed: true };
  if (!['received', 'investigating', 'awaiting_approval', 'executing', 'paused'].includes(wf.state)) {
    throw new ConflictError('workflow_not_running', `workflow is ${wf.state}; submit a new ticket`);
  }
  await creditWaitsEndedByFollowUp(trx, wf.id);
  const superseded = await supersedeUnclaimed(trx, wf);
  await trx
    .insertInto('conversation_items')
    .values({
      workflow_id: wf.id,
      round: wf.round,
      kind: 'user_message',
      call_id: null,
      item: JSON.stringify({ role: 'user', content: text }),
      idempotency_key: key,
      follow_up_superseded: key === null ? null : JSON.stringify(superseded),
    })
    .execute();
  return { rows: await nextRoundAfterFollowUp(trx, wf, superseded), superseded, replayed: false };
}

/** A run's row as the follow-up reads it under the run's lock. */
type LockedRun = Selectable<WorkflowsTable>;

/**
 * Supersedes every action of `wf` not yet claimed for execution (its approvals voided), and answers
 * each one's call `{executed: false, reason: "superseded"}` — here, before the follow-up's user
 * message, so the transcript keeps call → output order and the pairing rule holds. Returns what it
 * superseded, as the follow-up's answer lists it.
 */
async function supersedeUnclaimed(trx: Trx, wf: LockedRun): Promise<WorkflowMessageAccepted['superseded']> {
  const superseded: WorkflowMessageAccepted['superseded'] = [];
  for (const a of await endUnclaimedActions(trx, wf, 'superseded', 'agent-loop')) {
    superseded.push({ version: a.version, tool: a.tool, voidedApprovals: a.voidedApprovals });
    await trx
      .insertInto('conversation_items')
      .values({
        workflow_id: wf.id,
        round: wf.round,
        kind: 'function_call_output',
        call_id: a.callId,
        item: JSON.stringify({
          type: 'function_call_output',
          call_id: a.callId,
          output: JSON.stringify({ source: a.tool, trust: 'gatehouse', executed: false, reason: 'superseded' }),
        }),
      })
      .onConflict((oc) => oc.columns(['workflow_id', 'kind', 'call_id']).where('call_id', 'is not', null).doNothing())
      .execute();
  }
  return superseded;
}

/**
 * After a follow-up: the next model round as an outbox row when no call of the run is still in
 * flight (otherwise the last result starts it, and nothing is returned). A change plan prepared and
 * not yet scheduled keeps the run in `awaiting_approval`, the only state that offers
 * `schedule_change`: a follow-up that changed nothing of it ("any update?") must not leave the plan
 * unschedulable. One that superseded a schedule reopens the investigation instead, where the plan
 * may be prepared anew (ADR 0677).
 */
async function nextRoundAfterFollowUp(trx: Trx, wf: LockedRun, superseded: WorkflowMessageAccepted['superseded']): Promise<OutboxRow[]> {
  if ((await unansweredCalls(trx, wf.id)).length) return [];
  const planReady =
    wf.pack === 'change' && wf.state !== 'paused' && !superseded.some((a) => a.tool === 'schedule_change')
      ? await unscheduledPlan(trx, wf.id)
      : null;
  return [await startNextRound(trx, wf, planReady)];
}
