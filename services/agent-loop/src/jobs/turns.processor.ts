import OpenAI from 'openai';
import type { TurnJob } from '@gatehouse/contracts';
import { ConflictError, proposalsQueue } from '@gatehouse/contracts';
import {
  checkWorkflowTransition,
  checkWorkingTime,
  DependencyUnavailable,
  enqueueInTransaction,
  inTransaction,
  recordAudit,
  releaseWritesEnabled,
  transitionWorkflow,
  type Db,
  type OutagePolicy,
  type OutboxRow,
  type Trx,
  type WorkflowState,
} from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import { eligibleTools } from '@gatehouse/policy';
import { boundText, findTool, instructionsFor, toFunctionTool, toolsOfPack } from '@gatehouse/tools';
import { loadWorld, sha256Hex, canonicalJson, escapeUnstorable, modelSpendMicroUsd, type ReleaseManifest } from '@gatehouse/contracts';
import { randomUUID } from 'node:crypto';
import { recordModelCall } from '@gatehouse/telemetry';
import { loadTranscript } from '../domain/transcript.ts';
import { stopWorkflow, TERMINAL_STATES } from '../domain/workflow-state.ts';
import type { LoopTestHooks } from '../domain/test-hooks.ts';
import { tenantCapReached, type TenantSpendCap } from '../domain/tenant-spend.ts';

/**
 * What a turn without function calls answers: the model's text (`message`), else the text of its
 * refusal content parts (`refusal`: it declined), else nothing usable (`empty`: no text, or only
 * whitespace). The text is raw model output; the caller bounds and redacts it.
 */
export function finalAnswer(response: Pick<OpenAI.Responses.Response, 'output_text' | 'output'>): {
  kind: 'message' | 'refusal' | 'empty';
  text: string;
} {
  if (response.output_text.trim()) return { kind: 'message', text: response.output_text };
  const refusals = response.output.flatMap((item) =>
    item.type === 'message' ? item.content.flatMap((part) => (part.type === 'refusal' ? [part.refusal] : [])) : [],
  );
  const refusal = refusals.join('\n').trim();
  return refusal ? { kind: 'refusal', text: refusal } : { kind: 'empty', text: '' };
}

/**
 * The next step of a run the model finished: why it declined, or that the agent could not act
 * because consequential writes are off for its release (a rollback; `writesOff`, act mode only:
 * its changing tools were not offered), or that some of its actions were not carried out
 * (`failed`: the system of record refused or kept failing, nothing was written — the model was
 * told, and the rep must not read "done" as "done as approved"), or plainly done.
 */
function completedStep(
  kind: 'message' | 'refusal',
  wf: { release_id: string; writesOff: boolean },
  failed: Array<{ tool: string; target: string }>,
): string {
  if (kind === 'refusal')
    return 'The agent declined this ticket: read why (finalMessage); handle it yourself, or resubmit it with more detail.';
  if (wf.writesOff)
    return `Consequential writes are off for release ${wf.release_id} (an on-call rollback), so the agent could only look things up: read its final message, and submit the ticket again once writes are back on.`;
  if (failed.length)
    return `Done, but not carried out: ${[...new Set(failed.map((a) => `${a.tool} on ${a.target}`))].join(', ')} (the system of record kept failing; Gatehouse wrote nothing for it). Read the agent’s final message and check the order in its system before you submit the ticket again or act yourself.`;
  return 'Done: read the agent’s final message (finalMessage).';
}

/** Statuses of a later action on the same target that may carry out what a failed one did not. */
const MAY_HAVE_DONE_IT = ['pending_approval', 'approved', 'running', 'succeeded', 'failed_unknown'] as const;

/**
 * The run's actions that ended `failed` (not carried out) and that no later action of the same
 * tool on the same target may have carried out since (the model may propose the write again after
 * a failure: a succeeded or still-live retry means "not carried out" would tell the rep to do it
 * twice), in version order. Shape: `{tool, target}` each.
 */
export async function failedActions(db: Db | Trx, workflowId: string): Promise<Array<{ tool: string; target: string }>> {
  return db
    .selectFrom('actions as a')
    .select(['a.tool', 'a.target'])
    .where('a.workflow_id', '=', workflowId)
    .where('a.status', '=', 'failed')
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('actions as b')
            .select('b.id')
            .whereRef('b.workflow_id', '=', 'a.workflow_id')
            .whereRef('b.tool', '=', 'a.tool')
            .whereRef('b.target', '=', 'a.target')
            .whereRef('b.version', '>', 'a.version')
            .where('b.status', 'in', MAY_HAVE_DONE_IT),
        ),
      ),
    )
    .orderBy('a.version')
    .execute();
}

/**
 * Ends a run whose turn has no function calls. A message completes it with the text as its final
 * message; a refusal completes it with the model's reason, so the rep sees why it declined; an
 * empty answer stops it `model_error` with a next step (never a completed run with nothing to
 * read). The final message is untrusted output too: redacted, ≤ 1000 chars, cut marked.
 */
async function finishWithMessage(
  trx: Trx,
  deps: TurnDeps,
  wf: { id: string; release_id: string; state: WorkflowState; writesOff: boolean },
  round: number,
  response: OpenAI.Responses.Response,
): Promise<void> {
  const answer = finalAnswer(response);
  if (answer.kind === 'empty') {
    await stopWorkflow(
      trx,
      wf,
      'model_error',
      'The model answered with no text and no tool call; resubmit the ticket, and on-call should check the model service if it repeats.',
    );
    return;
  }
  // The prefix is bounded with the text: the final message stays within the boundary's length.
  const raw = answer.kind === 'refusal' ? `The agent declined: ${answer.text}` : answer.text;
  const text = deps.hooks.disableOutputBoundary ? escapeUnstorable(raw) : boundText(raw);
  await trx
    .insertInto('conversation_items')
    .values({
      workflow_id: wf.id,
      round,
      kind: 'assistant_message',
      call_id: null,
      item: JSON.stringify({ role: 'assistant', content: text }),
    })
    .execute();
  await transitionWorkflow(trx, wf.id, {
    to: 'completed',
    lockedFrom: wf.state,
    round,
    nextStep: completedStep(answer.kind, wf, await failedActions(trx, wf.id)),
    audit: {
      type: 'run.completed',
      service: 'agent-loop',
      step: round,
      outcome: answer.kind === 'refusal' ? 'declined' : 'completed',
      revisions: { release: wf.release_id },
    },
  });
}

/**
 * Charges a model answer that was paid for and discarded, in `trx`, which holds the run's lock
 * (taken first, as every lock on the run is: ADR 0014): its tokens and spend go to the run's
 * budget (the spend bound is checked before each model request, and re-runs must not make model
 * calls it never counts), and the answer is kept in `discarded_model_answers`, which the tenant's
 * daily model-spend cap sums with the recorded turns
 * (docs/decisions/0680-discarded-answers-count-toward-the-tenant-cap.md). `follow_up`: a
 * follow-up arrived while the model answered, so the round is re-run; `round_closed`: the run
 * ended, or another attempt recorded the round, meanwhile. No round is charged (none was recorded).
 */
async function chargeDiscardedAnswer(
  trx: Trx,
  wf: { id: string; release_id: string },
  round: number,
  price: ReleaseManifest['model'],
  response: OpenAI.Responses.Response,
  reason: 'follow_up' | 'round_closed',
): Promise<void> {
  const usage = response.usage;
  const tokens = { input_tokens: usage?.input_tokens ?? 0, output_tokens: usage?.output_tokens ?? 0 };
  await trx
    .insertInto('discarded_model_answers')
    .values({ workflow_id: wf.id, round, response_id: response.id, model: response.model, ...tokens, release_id: wf.release_id, reason })
    .execute();
  await chargeAnswer(trx, wf.id, price, usage, { round: false });
}

/**
 * Adds one model answer's usage to the run's budget, in `trx` (which holds the run's lock): its
 * total tokens and its spend priced by `price` (micro-USD, `modelSpendMicroUsd`), and with
 * `round` one model round. The one writer of a model answer's charge, recorded or discarded.
 */
async function chargeAnswer(
  trx: Trx,
  workflowId: string,
  price: ReleaseManifest['model'],
  usage: OpenAI.Responses.ResponseUsage | undefined,
  opts: { round: boolean },
): Promise<void> {
  const tokens = { input_tokens: usage?.input_tokens ?? 0, output_tokens: usage?.output_tokens ?? 0 };
  await trx
    .updateTable('budgets')
    .set((eb) => ({
      rounds_used: eb('rounds_used', '+', opts.round ? 1 : 0),
      tokens_used: eb('tokens_used', '+', usage?.total_tokens ?? 0),
      spend_micro_usd: eb('spend_micro_usd', '+', modelSpendMicroUsd(price, tokens)),
    }))
    .where('workflow_id', '=', workflowId)
    .execute();
}

/** Dependencies of {@link processTurn}. */
export interface TurnDeps {
  db: Db;
  relay: OutboxRelay;
  log: Logger;
  model: OpenAI;
  modelName: string;
  /** The release's model entry: prices the spend budget. */
  modelPrice: ReleaseManifest['model'];
  hooks: LoopTestHooks;
  /** Outage ceiling and crediting (the wait for an unavailable dependency is not working time). */
  outagePolicy: OutagePolicy;
  /** The tenant's daily model-spend cap, checked before each model request. */
  tenantCap: TenantSpendCap;
}

type FunctionCallItem = { type: 'function_call'; call_id: string; name: string; arguments: string };

/** Thrown when a follow-up arrived during the model call of a round; {@link processTurn} re-runs the round. */
export class TranscriptChanged extends ConflictError {
  constructor(workflowId: string, round: number) {
    super('transcript_changed', `a follow-up arrived during round ${round} of ${workflowId}; the round is re-run with it`);
  }
}

/**
 * Thrown inside a round's transaction when one of the answer's function calls carries a call_id
 * the run already holds (an earlier call of the same answer or of an earlier round): the
 * transaction rolls back and {@link takeTurn} records the round again without its calls and stops
 * the run `model_error` (docs/decisions/0693-a-call-id-names-one-call-of-a-run.md).
 */
export class CallIdReused extends ConflictError {
  constructor(workflowId: string, round: number) {
    super('call_id_reused', `an answer of round ${round} of ${workflowId} repeats a call_id the run already holds`);
  }
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
  return `The model ${cause}, so Gatehouse could not tell the calls apart and carried out none of that answer’s calls. Resubmit the ticket; if it happens again, on-call should check the model server: each function call of a run needs a call_id of its own (servers that number the calls call_0, call_1… in every answer do not).`;
}

/** How many user messages (ticket text and follow-ups) the workflow's transcript holds. */
async function countUserMessages(db: Db | Trx, workflowId: string): Promise<number> {
  const r = await db
    .selectFrom('conversation_items')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('workflow_id', '=', workflowId)
    .where('kind', '=', 'user_message')
    .executeTakeFirstOrThrow();
  return Number(r.n);
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

/** One model answer of a round, as {@link recordAnswer} records it. */
type RecordedAnswer = {
  wf: { id: string; release_id: string; catalog_digest: string; policy_revision: string };
  round: number;
  response: OpenAI.Responses.Response;
  /** The transcript sent (hashed into `model_turns`). */
  input: unknown;
  instructionsHash: string;
  functionCalls: number;
  /** When the request was sent (ms since the epoch): the audit's latency. */
  started: number;
};

/**
 * Records a model answer as its round, in `trx` (which holds the run's lock): its `model_turns`
 * row, its charge to the run's budget (one round, its tokens and spend) and its `model.response`
 * audit record with `outcome`. Each answer of a recorded round is charged here, once.
 */
async function recordAnswer(trx: Trx, deps: TurnDeps, a: RecordedAnswer, outcome: string): Promise<void> {
  const usage = a.response.usage;
  await trx
    .insertInto('model_turns')
    .values({
      workflow_id: a.wf.id,
      round: a.round,
      response_id: a.response.id,
      model: a.response.model,
      input_sha256: sha256Hex(canonicalJson(a.input)),
      instructions_sha256: a.instructionsHash,
      input_tokens: usage?.input_tokens ?? 0,
      output_tokens: usage?.output_tokens ?? 0,
      function_calls: a.functionCalls,
      release_id: a.wf.release_id,
    })
    .execute();
  await chargeAnswer(trx, a.wf.id, deps.modelPrice, usage, { round: true });
  await recordAudit(trx, {
    type: 'model.response',
    service: 'agent-loop',
    runId: a.wf.id,
    step: a.round,
    outcome,
    latencyMs: Date.now() - a.started,
    revisions: {
      model: a.response.model,
      promptHash: a.instructionsHash,
      toolCatalog: a.wf.catalog_digest,
      policy: a.wf.policy_revision,
      release: a.wf.release_id,
    },
  });
}

/**
 * After {@link CallIdReused} rolled the round back: records the answer as the round (charged once,
 * audited `call_id_reused`) with none of its calls, so none is dispatched nor left unanswered in
 * the transcript, and stops the run `model_error` with a next step naming the cause. An answer
 * whose run ended or whose round was recorded meanwhile is charged as discarded instead.
 * Returns the outbox rows to publish: none.
 */
async function stopForReusedCallId(deps: TurnDeps, a: RecordedAnswer, calls: ReadonlyArray<{ call_id: string }>): Promise<OutboxRow[]> {
  deps.log.warn(
    { workflowId: a.wf.id, round: a.round, callIds: calls.map((c) => c.call_id) },
    'model answer repeats a call_id: run stopped',
  );
  return inTransaction(deps.db, async (trx) => {
    const locked = await trx.selectFrom('workflows').selectAll().where('id', '=', a.wf.id).forUpdate().executeTakeFirstOrThrow();
    if (TERMINAL_STATES.has(locked.state) || locked.round >= a.round) {
      await chargeDiscardedAnswer(trx, a.wf, a.round, deps.modelPrice, a.response, 'round_closed');
      return [];
    }
    await recordAnswer(trx, deps, a, 'call_id_reused');
    await stopWorkflow(trx, a.wf, 'model_error', callIdReusedStep(calls));
    return [];
  });
}

/** Re-runs of one round, within one job attempt, for follow-ups that arrived during its model calls. */
const MAX_TRANSCRIPT_RERUNS = 10;

/**
 * Runs one model round of a workflow (queue `turns`). Budgets are checked before the request
 * is sent; the response's function calls are recorded as proposals and handed to the policy
 * gateway through the outbox, in the same transaction. A redelivered job for a round already
 * recorded is a no-op; a turn the transition table would refuse (docs/product/states.md#transition-table)
 * returns `refused:illegal_transition:…` before any model request.
 */
export async function processTurn(job: TurnJob, deps: TurnDeps): Promise<string> {
  // A follow-up that arrived while the model answered is no failure of the round: the round is
  // re-run with it here, without using up one of the job's attempts (five follow-ups in a row
  // used to dead-letter the turn and stop the run `step_failed`). Bounded: past
  // MAX_TRANSCRIPT_RERUNS the attempt fails and the queue's retry takes over.
  for (let rerun = 0; ; rerun++) {
    try {
      return await takeTurn(job, deps);
    } catch (err) {
      if (!(err instanceof TranscriptChanged) || rerun >= MAX_TRANSCRIPT_RERUNS) throw err;
      deps.log.info({ workflowId: job.workflowId, round: job.round, rerun: rerun + 1 }, 'follow-up during the model call: round re-run');
    }
  }
}

/** One try of {@link processTurn}'s round. @throws TranscriptChanged when a follow-up arrived during the model call. */
async function takeTurn(job: TurnJob, deps: TurnDeps): Promise<string> {
  const { db, log } = deps;
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).executeTakeFirst();
  if (!wf) return 'unknown_workflow';
  if (TERMINAL_STATES.has(wf.state) || wf.round >= job.round) return 'already_done';
  // A turn ends in `investigating` (calls) or `completed` (a message): refused before the model is
  // asked when the table would refuse either (a paused run, a call still unanswered).
  const illegal = await inTransaction(db, async (trx) => {
    const toInvestigating = await checkWorkflowTransition(trx, wf.id, wf.state, { to: 'investigating' });
    return toInvestigating ?? checkWorkflowTransition(trx, wf.id, wf.state, { to: 'completed' });
  });
  if (illegal) {
    log.warn({ workflowId: wf.id, state: wf.state, to: illegal.to, missing: illegal.missing }, 'turn refused: illegal transition');
    return `refused:illegal_transition:${wf.state}->${illegal.to}`;
  }
  // Bounds are checked before dispatch (docs/product/invariants.md#bounds); an outage this round waited
  // through is credited first, and one past the ceiling stops the run for what it is.
  const stopped = await inTransaction(db, async (trx) => {
    const time = await checkWorkingTime(trx, wf.id, job.outage, deps.outagePolicy);
    if (time.kind === 'dependency_unavailable') {
      await stopWorkflow(trx, wf, 'dependency_unavailable', time.nextStep);
      return 'dependency_unavailable';
    }
    const b = await trx.selectFrom('budgets').selectAll().where('workflow_id', '=', wf.id).executeTakeFirstOrThrow();
    if (time.kind === 'budget_exhausted' || b.rounds_used + 1 > b.max_rounds || b.spend_micro_usd >= b.max_spend_micro_usd) {
      await stopWorkflow(trx, wf, 'budget_exhausted');
      return 'budget_exhausted';
    }
    const capped = await tenantCapReached(trx, wf.tenant, deps.modelPrice, deps.tenantCap);
    if (capped) {
      await stopWorkflow(trx, wf, 'budget_exhausted', capped);
      return 'budget_exhausted';
    }
    return null;
  });
  if (stopped) return stopped;
  const budget = await db.selectFrom('budgets').selectAll().where('workflow_id', '=', wf.id).executeTakeFirstOrThrow();

  const catalog = toolsOfPack(wf.pack);
  const writesEnabled = await releaseWritesEnabled(db, wf.release_id);
  const offered = deps.hooks.disableToolFilter ? catalog : eligibleTools(catalog, { ...wf, writesEnabled }, loadWorld().agent.grantedTools);
  const instructions = instructionsFor(wf.pack);
  const tools = offered.map(toFunctionTool);
  // Counted before the transcript is read: a follow-up committed after this count may be missing
  // from the input, and the round is then re-run with it (below).
  const userMessagesSent = await countUserMessages(db, wf.id);
  const input = await loadTranscript(db, wf.id);
  let response: OpenAI.Responses.Response;
  const started = Date.now();
  try {
    response = await deps.model.responses.create(
      {
        model: deps.modelName,
        instructions: instructions.text,
        input: input as unknown as OpenAI.Responses.ResponseInput,
        tools,
        tool_choice: tools.length ? 'auto' : 'none',
        // One call per response; several calls, if the model sends them anyway, are each answered.
        parallel_tool_calls: false,
        store: false,
        // Stateless reasoning (ADR 0145): the reasoning items come back encrypted and are resent next round.
        include: ['reasoning.encrypted_content'],
        metadata: { workflow_id: wf.id, ticket_id: wf.ticket_id, release: wf.release_id },
      },
      // The client's own retries (429/5xx) stay inside the run's remaining working time.
      { timeout: Math.max(1000, new Date(budget.deadline_at).getTime() - Date.now()) },
    );
  } catch (err) {
    const rejected =
      err instanceof OpenAI.APIError &&
      err.status !== undefined &&
      err.status >= 400 &&
      err.status < 500 &&
      err.status !== 408 &&
      err.status !== 429;
    const outcome = rejected ? 'rejected' : err instanceof OpenAI.APIError ? 'unavailable' : 'error';
    recordModelCall({ model: deps.modelName, outcome, durationMs: Date.now() - started });
    if (rejected) {
      log.error({ workflowId: wf.id, status: err.status }, 'model rejected the request');
      await inTransaction(db, (trx) => stopWorkflow(trx, wf, 'model_error'));
      return 'model_error';
    }
    if (!(err instanceof OpenAI.APIError)) throw err; // not the model's answer: the queue retries the round
    // Unanswered, 408/429/5xx after the client's own retries: the model is unavailable. The job
    // is held for it (no call was recorded) and the wait is not the run's working time.
    throw new DependencyUnavailable('model', `model unavailable: ${(err as Error).message}`, { cause: err });
  }

  // Latency, tokens and spend of the answer (ADR 0260): the same price table as the spend budget.
  const answered = { input_tokens: response.usage?.input_tokens ?? 0, output_tokens: response.usage?.output_tokens ?? 0 };
  recordModelCall({
    model: deps.modelName,
    outcome: 'ok',
    durationMs: Date.now() - started,
    inputTokens: answered.input_tokens,
    outputTokens: answered.output_tokens,
    spendMicroUsd: modelSpendMicroUsd(deps.modelPrice, answered),
  });
  if (deps.hooks.crashAfterModelResponse) process.kill(process.pid, 'SIGKILL'); // test hook: nothing recorded yet
  // Model text is kept verbatim except what the ledger cannot store (a NUL, a lone surrogate),
  // which becomes its JSON escape: parsing then gives the call a validation result.
  const calls = response.output
    .filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === 'function_call')
    .map((c) => ({ ...c, call_id: escapeUnstorable(c.call_id), name: escapeUnstorable(c.name), arguments: escapeUnstorable(c.arguments) }));
  const answer: RecordedAnswer = {
    wf,
    round: job.round,
    response,
    input,
    instructionsHash: instructions.hash,
    functionCalls: calls.length,
    started,
  };
  const rows = await inTransaction(db, async (trx) => {
    const locked = await trx.selectFrom('workflows').selectAll().where('id', '=', wf.id).forUpdate().executeTakeFirstOrThrow();
    if (TERMINAL_STATES.has(locked.state) || locked.round >= job.round) {
      // Nothing to record for an ended run or a round already recorded, but the answer was paid for.
      await chargeDiscardedAnswer(trx, wf, job.round, deps.modelPrice, response, 'round_closed');
      return [] as OutboxRow[];
    }
    // A follow-up arrived while the model was answering (docs/product/public-contract.md#follow-up-messages: the agent takes a new turn with
    // it). Its own turn job has this round's id, so it merged with this one: record nothing from a
    // response to an out-of-date transcript; processTurn re-runs the round with the follow-up.
    // The answer thrown away was still paid for: the run's spend budget and the tenant's daily cap
    // count it, charged under this same lock (ADR 0680).
    if ((await countUserMessages(trx, wf.id)) !== userMessagesSent) {
      await chargeDiscardedAnswer(trx, wf, job.round, deps.modelPrice, response, 'follow_up');
      return 'transcript_changed' as const;
    }
    const b = await trx.selectFrom('budgets').selectAll().where('workflow_id', '=', wf.id).forUpdate().executeTakeFirstOrThrow();
    const outcome = calls.length ? `function_calls:${calls.length}` : finalAnswer(response).kind;
    await recordAnswer(trx, deps, answer, outcome);

    if (!calls.length) {
      const writesOff = !writesEnabled && wf.mode === 'act';
      await finishWithMessage(trx, deps, { id: wf.id, release_id: wf.release_id, state: locked.state, writesOff }, job.round, response);
      return [] as OutboxRow[];
    }

    if (b.tool_calls_used + calls.length > b.max_tool_calls) {
      // The calls are never dispatched nor added to the transcript, so no call is left unanswered.
      await stopWorkflow(trx, wf, 'budget_exhausted');
      return [] as OutboxRow[];
    }
    await trx
      .updateTable('budgets')
      .set({ tool_calls_used: b.tool_calls_used + calls.length })
      .where('workflow_id', '=', wf.id)
      .execute();
    await transitionWorkflow(trx, wf.id, { to: 'investigating', round: job.round, lockedFrom: locked.state });

    // Reasoning items are kept with the calls they preceded, so the next round sends them back
    // right before those calls, where the Responses API expects them; their content goes nowhere else.
    const reasoning = deps.hooks.dropReasoning ? [] : reasoningBeforeCalls(response.output);
    const out: OutboxRow[] = [];
    for (const [i, call] of calls.entries()) {
      const item: FunctionCallItem = { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments };
      const before = reasoning[i] ?? [];
      // The run's call_ids are unique (the index conversation_items_call_once): a repeated one
      // inserts nothing here, and the round is recorded again without its calls (below).
      const kept = await trx
        .insertInto('conversation_items')
        .values({
          workflow_id: wf.id,
          round: job.round,
          kind: 'function_call',
          call_id: call.call_id,
          item: JSON.stringify(item),
          reasoning: before.length ? JSON.stringify(before) : null,
        })
        .onConflict((oc) => oc.doNothing())
        .returning('id')
        .executeTakeFirst();
      if (!kept) throw new CallIdReused(wf.id, job.round);
      const proposalId = randomUUID();
      // Only catalog names go to the ledger and audit: a model-invented name may carry anything.
      const toolLabel = findTool(call.name) ? call.name : 'unknown_tool';
      await trx
        .insertInto('proposals')
        .values({
          id: proposalId,
          workflow_id: wf.id,
          round: job.round,
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
        step: job.round,
        tool: toolLabel,
        callId: call.call_id,
        revisions: { toolCatalog: wf.catalog_digest, release: wf.release_id },
      });
      out.push(
        await enqueueInTransaction(trx, proposalsQueue, { release: wf.release_id, workflowId: wf.id, proposalId, callId: call.call_id }),
      );
    }
    return out;
  }).catch((err: unknown) => {
    if (!(err instanceof CallIdReused)) throw err;
    return stopForReusedCallId(deps, answer, calls);
  });
  if (rows === 'transcript_changed') throw new TranscriptChanged(wf.id, job.round);
  await deps.relay.publish(rows);
  return rows.length ? `proposed:${rows.length}` : 'recorded';
}
