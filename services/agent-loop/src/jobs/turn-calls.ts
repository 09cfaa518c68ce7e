import type OpenAI from 'openai';
import { randomUUID } from 'node:crypto';
import { AS_A_NEW_TICKET, ConflictError, escapeUnstorable, proposalsQueue, sha256Hex } from '@gatehouse/contracts';
import { enqueueInTransaction, recordAudit, type OutboxRow, type Trx } from '@gatehouse/ledger';
import { containsSecret, findTool } from '@gatehouse/tools';

// The function calls of a recorded model answer: how each becomes a transcript item, a proposal
// and a `proposals` job (docs/decisions/0693-a-call-id-names-one-call-of-a-run.md for call_ids).

/** A function call of a model answer, its text made storable (`escapeUnstorable`). */
export type ProposedCall = { call_id: string; name: string; arguments: string };

/** The run a round's calls belong to, as {@link recordProposedCalls} needs it. */
export type CallingRun = { id: string; release_id: string; catalog_digest: string; state: string };

/**
 * Thrown inside a round's transaction when one of the answer's function calls carries a call_id
 * the run already holds (an earlier call of the same answer or of an earlier round): the
 * transaction rolls back and the turn records the round again without its calls and stops the
 * run `model_error` (docs/decisions/0693-a-call-id-names-one-call-of-a-run.md).
 */
export class CallIdReused extends ConflictError {
  constructor(workflowId: string, round: number) {
    super('call_id_reused', `an answer of round ${round} of ${workflowId} repeats a call_id the run already holds`);
  }
}

/**
 * Longest call_id kept, characters. A call_id is the call's name in the transcript's unique index
 * (`conversation_items_call_once`, whose btree entries hold at most 2704 bytes), the proposal, the
 * action and every audit event of the call; model servers send ~30 (`call_` and 24 characters).
 * 256 characters are at most 1024 bytes of UTF-8 (docs/decisions/0734-a-call-id-is-short.md).
 */
export const MAX_CALL_ID_CHARS = 256;

/** Why a call_id of a model answer is not kept as a call's name (see {@link callIdRefusal}). */
export type CallIdRefusalReason = 'call_id_holds_secret' | 'call_id_too_long';

/**
 * Why `callId` cannot name a call of a run, or null when it can: it holds a secret shape
 * (`containsSecret`: a planted canary, an API key, a bearer token, a JWT — what the output
 * boundary redacts; docs/decisions/0733-a-call-id-holds-no-secret.md), or it is longer than
 * {@link MAX_CALL_ID_CHARS} (docs/decisions/0734-a-call-id-is-short.md). A call_id is kept
 * verbatim — in the audit trail, the workflow read, the logs — so neither may be.
 */
export function callIdRefusal(callId: string): CallIdRefusalReason | null {
  if (callId.length > MAX_CALL_ID_CHARS) return 'call_id_too_long';
  return containsSecret(callId) ? 'call_id_holds_secret' : null;
}

/**
 * Thrown inside a round's transaction, before anything of the answer is written, when one of its
 * function calls has a call_id {@link callIdRefusal} refuses: the answer is recorded without its
 * calls and the run stops `model_error`, as for a reused call_id (ADR 0693, 0733, 0734).
 */
export class CallIdRefused extends ConflictError {
  constructor(workflowId: string, round: number, reason: CallIdRefusalReason) {
    super(reason, `an answer of round ${round} of ${workflowId} names a call with a call_id that cannot be kept (${reason})`);
  }
}

/** The next step of a run stopped for {@link CallIdRefused} with `reason`. The call_id is not quoted. */
export function callIdRefusedStep(reason: string): string {
  const cause =
    reason === 'call_id_too_long'
      ? `a call_id longer than ${MAX_CALL_ID_CHARS} characters`
      : 'a call_id that holds a secret or a token (an API key, a bearer token, a JWT or a planted canary)';
  return `The model gave a function call ${cause}, so Gatehouse recorded and carried out none of that answer’s calls: a call_id names the call in the audit trail, which keeps short names and never a secret. Resubmit the ticket ${AS_A_NEW_TICKET}; if it happens again, on-call should check the model server and the ticket text for an injected instruction.`;
}

/**
 * The next step of a run stopped for an answer whose call_ids repeat: within the answer itself
 * (two of its calls share one), or an earlier answer's. The call_id is model output and not quoted.
 */
export function callIdReusedStep(calls: ReadonlyArray<{ call_id: string }>): string {
  const ids = calls.map((c) => c.call_id);
  const cause =
    new Set(ids).size < ids.length
      ? 'gave two of its function calls the same call_id twice in one answer'
      : 'gave a function call a call_id an earlier answer of this run already used';
  return `The model ${cause}, so Gatehouse could not tell the calls apart and carried out none of that answer’s calls. Resubmit the ticket ${AS_A_NEW_TICKET}; if it happens again, on-call should check the model server: each function call of a run needs a call_id of its own (servers that number the calls call_0, call_1… in every answer do not).`;
}

/** A reasoning item as kept in the transcript and resent as input (ADR 0145). */
export type ReasoningInputItem = {
  type: 'reasoning';
  id: string;
  summary: Array<{ type: 'summary_text'; text: string }>;
  encrypted_content: string;
};

/**
 * The reasoning items of a response grouped by the function call they precede: `groups[i]` holds,
 * in the order received, those after the (i-1)-th function_call and before the i-th (reasoning
 * after the last call precedes nothing and is dropped). Only `id`, `summary` and
 * `encrypted_content` are kept; an item without `encrypted_content` cannot be resent with
 * `store: false` and is dropped (docs/decisions/0145-reasoning-items-in-the-transcript.md).
 */
export function reasoningBeforeCalls(output: OpenAI.Responses.ResponseOutputItem[]): ReasoningInputItem[][] {
  const groups: ReasoningInputItem[][] = [];
  let pending: ReasoningInputItem[] = [];
  for (const o of output) {
    if (o.type === 'function_call') {
      groups.push(pending);
      pending = [];
    } else if (o.type === 'reasoning' && typeof o.encrypted_content === 'string' && o.encrypted_content) {
      const summary = (o.summary ?? []).map((x) => ({ type: 'summary_text' as const, text: escapeUnstorable(x.text) }));
      pending.push({ type: 'reasoning', id: o.id, summary, encrypted_content: o.encrypted_content });
    }
  }
  return groups;
}

/**
 * Records each of a round's function calls in `trx` (which holds the run's lock, after the round's
 * answer was recorded): its `function_call` transcript item with the reasoning that preceded it
 * (`reasoning[i]`), its `proposals` row (only catalog names; any other is `unknown_tool`), its
 * `proposal.received` audit record and its `proposals` job in the outbox.
 * Returns the outbox rows to publish after commit, one per call, in order.
 * @throws CallIdRefused when a call's call_id is too long or holds a secret shape (nothing written).
 * @throws CallIdReused when a call's call_id is already in the run's transcript (the index
 *   `conversation_items_call_once`: the insert writes nothing, no extra statement).
 */
export async function recordProposedCalls(
  trx: Trx,
  wf: CallingRun,
  round: number,
  calls: readonly ProposedCall[],
  reasoning: ReasoningInputItem[][],
): Promise<OutboxRow[]> {
  // Before anything is written (or a reused call_id is reported with the others): no call_id that
  // holds a secret (ADR 0733) or is too long to be a name (ADR 0734) is kept.
  for (const c of calls) {
    const refused = callIdRefusal(c.call_id);
    if (refused) throw new CallIdRefused(wf.id, round, refused);
  }
  const out: OutboxRow[] = [];
  for (const [i, call] of calls.entries()) {
    const item = { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments };
    const before = reasoning[i] ?? [];
    const kept = await trx
      .insertInto('conversation_items')
      .values({
        workflow_id: wf.id,
        round,
        kind: 'function_call',
        call_id: call.call_id,
        item: JSON.stringify(item),
        reasoning: before.length ? JSON.stringify(before) : null,
      })
      .onConflict((oc) => oc.doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!kept) throw new CallIdReused(wf.id, round);
    const proposalId = randomUUID();
    // Only catalog names go to the ledger and audit: a model-invented name may carry anything.
    const toolLabel = findTool(call.name) ? call.name : 'unknown_tool';
    await trx
      .insertInto('proposals')
      .values({
        id: proposalId,
        workflow_id: wf.id,
        round,
        call_id: call.call_id,
        tool: toolLabel,
        arguments_sha256: sha256Hex(call.arguments),
        status: 'received',
        validation_error: null,
        // The state the tools were offered in: state-gated tools are judged against it.
        offered_in_state: wf.state,
      })
      .execute();
    await recordAudit(trx, {
      type: 'proposal.received',
      service: 'agent-loop',
      runId: wf.id,
      step: round,
      tool: toolLabel,
      callId: call.call_id,
      revisions: { toolCatalog: wf.catalog_digest, release: wf.release_id },
    });
    out.push(
      await enqueueInTransaction(trx, proposalsQueue, { release: wf.release_id, workflowId: wf.id, proposalId, callId: call.call_id }),
    );
  }
  return out;
}
