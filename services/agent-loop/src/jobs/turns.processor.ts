import OpenAI from 'openai';
import type { TurnJob } from '@gatehouse/contracts';
import { AS_A_NEW_TICKET, ConflictError, OWN_CREDENTIAL_REFUSED } from '@gatehouse/contracts';
import { sql, type Selectable } from 'kysely';
import {
  checkWorkflowTransition,
  checkWorkingTime,
  DependencyUnavailable,
  inTransaction,
  recordAudit,
  releaseWritesEnabled,
  transitionWorkflow,
  type Db,
  type OutagePolicy,
  type OutboxRow,
  type Trx,
  type WorkflowState,
  type BudgetsTable,
  type WorkflowsTable,
} from '@gatehouse/ledger';
import type { Logger, OutboxRelay } from '@gatehouse/platform';
import { eligibleTools } from '@gatehouse/policy';
import { boundReason, boundText, instructionsFor, toFunctionTool, toolsOfPack } from '@gatehouse/tools';
import {
  loadWorld,
  sha256Hex,
  canonicalJson,
  escapeUnstorable,
  isOutageStatus,
  modelSpendMicroUsd,
  type ReleaseManifest,
} from '@gatehouse/contracts';
import { recordModelCall } from '@gatehouse/telemetry';
import { loadTranscript } from '../domain/transcript.ts';
import { stopWorkflow, TERMINAL_STATES } from '../domain/workflow-state.ts';
import type { LoopTestHooks } from '../domain/test-hooks.ts';
import { tenantCapReached, type TenantSpendCap } from '../domain/tenant-spend.ts';
import { trustedAnswer } from '../domain/model-answer.ts';
import {
  CallIdRefused,
  callIdRefusedStep,
  CallIdReused,
  callIdReusedStep,
  reasoningBeforeCalls,
  recordProposedCalls,
  type ProposedCall,
} from './turn-calls.ts';

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
 * because consequential writes are off for its release (`writesOff`, act mode only: its changing
 * tools were not offered; {@link writesOffStep} says why), or that some of its actions were not
 * carried out (`failed`: nothing was written — the model was told, and the rep must not read
 * "done" as "done as approved"; {@link notCarriedOut} says why), or plainly done.
 */
function completedStep(
  kind: 'message' | 'refusal',
  wf: { release_id: string; writesOff: boolean; releaseStatus?: string },
  failed: FailedAction[],
): string {
  if (kind === 'refusal')
    return `The agent declined this ticket: read why (finalMessage); handle it yourself, or resubmit it with more detail ${AS_A_NEW_TICKET}.`;
  if (wf.writesOff) return writesOffStep(wf.release_id, wf.releaseStatus);
  if (failed.length) return notCarriedOut(failed);
  return 'Done: read the agent’s final message (finalMessage).';
}

/**
 * Why an act run of release `release` (of status `status`, `releases.status`) could only look
 * things up: a `candidate` is a canary whose writes start disabled until on-call enables them
 * (docs/product/releases.md#canary); any other release had them turned off by a rollback
 * (docs/product/releases.md#rollback). Never names a rollback that did not happen.
 */
function writesOffStep(release: string, status: string | undefined): string {
  const lookOnly = 'so the agent could only look things up: read its final message, and submit the ticket again';
  if (status === 'candidate')
    return `Consequential writes are not enabled yet for release ${release} (a canary: on-call enables them with gatehouse release enable-writes ${release} once its analysis passes), ${lookOnly} once they are.`;
  return `Consequential writes are off for release ${release} (an on-call rollback), ${lookOnly} once writes are back on.`;
}

/**
 * The next step of a run some of whose actions failed, naming each `tool on target` once. Those
 * the system of record failed on (errors, timeouts: `credentialRefused` false) and those where it
 * refused Gatehouse's own delegated credential (ADR 0600, 0761: the executor's signing key is not
 * one it trusts — a configuration fault only on-call can fix, which no resubmission clears until
 * then) are told apart: the second names on-call's fix, never "kept failing".
 */
export function notCarriedOut(failed: FailedAction[]): string {
  const names = (which: FailedAction[]): string => [...new Set(which.map((a) => `${a.tool} on ${a.target}`))].join(', ');
  const refused = failed.filter((a) => a.credentialRefused);
  const failing = failed.filter((a) => !a.credentialRefused);
  const parts = [
    ...(failing.length ? [`${names(failing)} (the system of record kept failing; Gatehouse wrote nothing for it)`] : []),
    ...(refused.length
      ? [
          `${names(refused)} (the system of record refused Gatehouse’s own credential: the executor’s delegation signing key is not one it trusts — a configuration fault for on-call, not a decision on this ticket; Gatehouse wrote nothing for it)`,
        ]
      : []),
  ];
  const onCall = refused.length
    ? ' Ask on-call to fix the executor’s delegation key first (its /readyz and `gatehouse stack status` name the key ids; the delegation_rejected monitor fires): until then every such write is refused again.'
    : '';
  return `Done, but not carried out: ${parts.join('; ')}.${onCall} Read the agent’s final message and check the order in its system before you submit the ticket again or act yourself.`;
}

/**
 * A run's action not carried out: its tool and target, and whether the system of record refused
 * our own delegated credential (`OWN_CREDENTIAL_REFUSED` over its operation's error).
 */
export interface FailedAction {
  tool: string;
  target: string;
  credentialRefused: boolean;
}

/** Statuses of a later action on the same target that may carry out what a failed one did not. */
const MAY_HAVE_DONE_IT = ['pending_approval', 'approved', 'running', 'succeeded', 'failed_unknown'] as const;

/**
 * The run's actions that ended `failed` (not carried out) and that no later action of the same
 * tool on the same target may have carried out since (the model may propose the write again after
 * a failure: a succeeded or still-live retry means "not carried out" would tell the rep to do it
 * twice), in version order, each with whether its operation's error is a refusal of our own
 * credential ({@link FailedAction}).
 */
export async function failedActions(db: Db | Trx, workflowId: string): Promise<FailedAction[]> {
  return db
    .selectFrom('actions as a')
    .leftJoin('operations as o', 'o.key', 'a.operation_key')
    .select(['a.tool', 'a.target', sql<boolean>`coalesce(o.error ~ ${OWN_CREDENTIAL_REFUSED}, false)`.as('credentialRefused')])
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

/** The `releases.status` of a run's release when its writes were off (the only case its next step names it), else undefined. */
async function releaseStatusOf(trx: Trx, wf: { release_id: string; writesOff: boolean }): Promise<string | undefined> {
  if (!wf.writesOff) return undefined;
  const r = await trx.selectFrom('releases').select('status').where('id', '=', wf.release_id).executeTakeFirst();
  return r?.status;
}

/**
 * Ends a run whose turn has no function calls. A message completes it with the text as its final
 * message; a refusal completes it with the model's reason, so the rep sees why it declined; an
 * empty answer stops it `model_error` with a next step (never a completed run with nothing to
 * read). The final message is untrusted output too: redacted, ≤ 1000 chars, cut marked. A run
 * completed with `writesOff` is marked `writes_withheld` (ADR 0724).
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
      `The model answered with no text and no tool call; resubmit it ${AS_A_NEW_TICKET}, and on-call should check the model service if it repeats.`,
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
    nextStep: completedStep(answer.kind, { ...wf, releaseStatus: await releaseStatusOf(trx, wf) }, await failedActions(trx, wf.id)),
    audit: {
      type: 'run.completed',
      service: 'agent-loop',
      step: round,
      outcome: answer.kind === 'refusal' ? 'declined' : 'completed',
      revisions: { release: wf.release_id },
    },
  });
  // Not evidence of what the release does with writes on: the canary analysis leaves it out (ADR 0724).
  if (wf.writesOff) await trx.updateTable('workflows').set({ writes_withheld: true }).where('id', '=', wf.id).execute();
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

/** Thrown when a follow-up arrived during the model call of a round; {@link processTurn} re-runs the round. */
export class TranscriptChanged extends ConflictError {
  constructor(workflowId: string, round: number) {
    super('transcript_changed', `a follow-up arrived during round ${round} of ${workflowId}; the round is re-run with it`);
  }
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
 * After {@link CallIdReused} or {@link CallIdRefused} rolled the round back: records the answer as
 * the round (charged once, audited with the error's reason: `call_id_reused`,
 * `call_id_holds_secret`, `call_id_too_long`) with none of its calls, so none is dispatched nor
 * left unanswered in the transcript, and stops the run `model_error` with a next step naming the
 * cause. An answer whose run ended or whose round was recorded meanwhile is charged as discarded
 * instead. No call_id, reused or refused, is logged (ADR 0733, 0734). Returns the outbox rows to publish: none.
 */
async function stopForCallIds(
  deps: TurnDeps,
  a: RecordedAnswer,
  calls: ReadonlyArray<{ call_id: string }>,
  err: CallIdReused | CallIdRefused,
): Promise<OutboxRow[]> {
  const refused = err instanceof CallIdRefused;
  // The call_ids are the model's text: only their count is logged, reused or refused alike.
  deps.log.warn(
    { workflowId: a.wf.id, round: a.round, calls: calls.length },
    refused
      ? `model answer names a call_id that cannot be kept (${err.reason}): run stopped`
      : 'model answer repeats a call_id: run stopped',
  );
  return inTransaction(deps.db, async (trx) => {
    const locked = await trx.selectFrom('workflows').selectAll().where('id', '=', a.wf.id).forUpdate().executeTakeFirstOrThrow();
    if (TERMINAL_STATES.has(locked.state) || locked.round >= a.round) {
      await chargeDiscardedAnswer(trx, a.wf, a.round, deps.modelPrice, a.response, 'round_closed');
      return [];
    }
    await recordAnswer(trx, deps, a, err.reason);
    await stopWorkflow(trx, a.wf, 'model_error', refused ? callIdRefusedStep(err.reason) : callIdReusedStep(calls));
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

/** A run admitted to its next round by {@link admitTurn}: its row and its budgets as read then. */
type AdmittedTurn = { wf: Selectable<WorkflowsTable>; budget: Selectable<BudgetsTable> };

/**
 * Whether the round may ask the model: the run exists, is live and has not recorded this round;
 * the transition table would take the round's end (`investigating` for calls, `completed` for a
 * message); its working time, round, spend budgets and the tenant's daily cap allow one more
 * request (docs/product/invariants.md#bounds: checked before dispatch). A run past a bound is
 * stopped here, in its own transaction.
 * Returns the run and its budgets, or the job's outcome when the round is not taken.
 */
async function admitTurn(job: TurnJob, deps: TurnDeps): Promise<AdmittedTurn | string> {
  const { db, log } = deps;
  const wf = await db.selectFrom('workflows').selectAll().where('id', '=', job.workflowId).executeTakeFirst();
  if (!wf) return 'unknown_workflow';
  if (TERMINAL_STATES.has(wf.state) || wf.round >= job.round) return 'already_done';
  // Refused before the model is asked when the table would refuse either end (a paused run, a
  // call still unanswered).
  const illegal = await inTransaction(db, async (trx) => {
    const toInvestigating = await checkWorkflowTransition(trx, wf.id, wf.state, { to: 'investigating' });
    return toInvestigating ?? checkWorkflowTransition(trx, wf.id, wf.state, { to: 'completed' });
  });
  if (illegal) {
    log.warn({ workflowId: wf.id, state: wf.state, to: illegal.to, missing: illegal.missing }, 'turn refused: illegal transition');
    return `refused:illegal_transition:${wf.state}->${illegal.to}`;
  }
  // An outage this round waited through is credited first, and one past the ceiling stops the
  // run for what it is.
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
  return { wf, budget };
}

/** What one round asks the model: the pack's instructions, the transcript and the offered tools. */
type TurnRequest = { instructions: { text: string }; input: unknown; tools: ReturnType<typeof toFunctionTool>[] };

/**
 * Sends the round's request through the `openai` client, its own 429/5xx retries bounded by the
 * run's remaining working time, and records the call's latency metric on failure.
 * Returns the response, its `id`, `model` and `usage` made safe to record (`trustedAnswer`, ADR 0744),
 * or `model_error` when the model rejected the request (a 4xx other than
 * 408 and 429): the run is then stopped `model_error`.
 * @throws DependencyUnavailable('model') when the model stayed unavailable (408, 429, 5xx,
 *   unanswered): the job is held and the wait is not working time; its message (logged) keeps the
 *   model's own text only through `boundReason`, since a model's error may echo its input
 *   (ADR 0710), and carries no cause. Any other error as thrown (the queue retries the round).
 */
async function askModel(
  deps: TurnDeps,
  wf: Selectable<WorkflowsTable>,
  budget: Selectable<BudgetsTable>,
  request: TurnRequest,
  started: number,
): Promise<OpenAI.Responses.Response | 'model_error'> {
  let answer: OpenAI.Responses.Response;
  try {
    answer = await deps.model.responses.create(
      {
        model: deps.modelName,
        instructions: request.instructions.text,
        input: request.input as OpenAI.Responses.ResponseInput,
        tools: request.tools,
        tool_choice: request.tools.length ? 'auto' : 'none',
        // One call per response; several calls, if the model sends them anyway, are each answered.
        parallel_tool_calls: false,
        store: false,
        // Stateless reasoning (ADR 0145): the reasoning items come back encrypted and are resent next round.
        include: ['reasoning.encrypted_content'],
        metadata: { workflow_id: wf.id, ticket_id: wf.ticket_id, release: wf.release_id },
      },
      { timeout: Math.max(1000, new Date(budget.deadline_at).getTime() - Date.now()) },
    );
  } catch (err) {
    // A refusal is a 4xx the model answered on purpose; 408 and 429 did not process the request.
    const rejected = err instanceof OpenAI.APIError && err.status !== undefined && err.status >= 400 && !isOutageStatus(err.status);
    const outcome = rejected ? 'rejected' : err instanceof OpenAI.APIError ? 'unavailable' : 'error';
    recordModelCall({ model: deps.modelName, outcome, durationMs: Date.now() - started });
    if (rejected) {
      deps.log.error({ workflowId: wf.id, status: err.status }, 'model rejected the request');
      await inTransaction(deps.db, (trx) => stopWorkflow(trx, wf, 'model_error'));
      return 'model_error';
    }
    if (!(err instanceof OpenAI.APIError)) throw err;
    // The error's text is the model's answer: untrusted, and it may echo the request (ADR 0710).
    throw new DependencyUnavailable('model', `model unavailable: ${boundReason(err.message)}`);
  }
  // The answer's id, model name and usage are the server's word: bounded and clamped before anything records them (ADR 0744).
  const { response, corrected } = trustedAnswer(answer);
  if (corrected.id || corrected.model || corrected.usage)
    deps.log.warn({ workflowId: wf.id, corrected }, 'model answer: id, model name or usage corrected');
  return response;
}

/** What {@link recordRound} needs beyond the answer: the round's context when it was asked. */
type RoundContext = {
  calls: ProposedCall[];
  /** User messages in the transcript when it was read: a different count means a follow-up arrived. */
  userMessagesSent: number;
  writesEnabled: boolean;
};

/**
 * Records a model answer as its round, under the run's lock, in one transaction: the answer and
 * its charge ({@link recordAnswer}); then either the run's final message, or — within the
 * tool-call budget — each call as a proposal with its `proposals` job ({@link recordProposedCalls}).
 * An ended run or a recorded round charges the answer as discarded and records nothing.
 * Returns the outbox rows to publish, or `transcript_changed` when a follow-up arrived during
 * the model call (the answer is charged as discarded; the caller re-runs the round).
 * @throws CallIdReused when a call repeats a call_id the run holds, CallIdRefused when a call_id is
 *   too long or holds a secret shape (the transaction rolled back).
 */
async function recordRound(deps: TurnDeps, answer: RecordedAnswer & { wf: Selectable<WorkflowsTable> }, ctx: RoundContext) {
  const { wf, round, response } = answer;
  return inTransaction(deps.db, async (trx) => {
    const locked = await trx.selectFrom('workflows').selectAll().where('id', '=', wf.id).forUpdate().executeTakeFirstOrThrow();
    if (TERMINAL_STATES.has(locked.state) || locked.round >= round) {
      // Nothing to record for an ended run or a round already recorded, but the answer was paid for.
      await chargeDiscardedAnswer(trx, wf, round, deps.modelPrice, response, 'round_closed');
      return [] as OutboxRow[];
    }
    // A follow-up arrived while the model was answering (docs/product/public-contract.md#follow-up-messages: the agent takes a new turn with
    // it). Its own turn job has this round's id, so it merged with this one: record nothing from a
    // response to an out-of-date transcript; processTurn re-runs the round with the follow-up.
    // The answer thrown away was still paid for: the run's spend budget and the tenant's daily cap
    // count it, charged under this same lock (ADR 0680).
    if ((await countUserMessages(trx, wf.id)) !== ctx.userMessagesSent) {
      await chargeDiscardedAnswer(trx, wf, round, deps.modelPrice, response, 'follow_up');
      return 'transcript_changed' as const;
    }
    const b = await trx.selectFrom('budgets').selectAll().where('workflow_id', '=', wf.id).forUpdate().executeTakeFirstOrThrow();
    const calls = ctx.calls;
    await recordAnswer(trx, deps, answer, calls.length ? `function_calls:${calls.length}` : finalAnswer(response).kind);
    if (!calls.length) {
      const writesOff = !ctx.writesEnabled && wf.mode === 'act';
      await finishWithMessage(trx, deps, { id: wf.id, release_id: wf.release_id, state: locked.state, writesOff }, round, response);
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
    await transitionWorkflow(trx, wf.id, { to: 'investigating', round, lockedFrom: locked.state });
    // Reasoning items are kept with the calls they preceded, so the next round sends them back
    // right before those calls, where the Responses API expects them; their content goes nowhere else.
    const reasoning = deps.hooks.dropReasoning ? [] : reasoningBeforeCalls(response.output);
    return recordProposedCalls(trx, wf, round, calls, reasoning);
  });
}

/** One try of {@link processTurn}'s round. @throws TranscriptChanged when a follow-up arrived during the model call. */
async function takeTurn(job: TurnJob, deps: TurnDeps): Promise<string> {
  const admitted = await admitTurn(job, deps);
  if (typeof admitted === 'string') return admitted;
  const { wf, budget } = admitted;
  const { db } = deps;
  const catalog = toolsOfPack(wf.pack);
  const writesEnabled = await releaseWritesEnabled(db, wf.release_id);
  const offered = deps.hooks.disableToolFilter ? catalog : eligibleTools(catalog, { ...wf, writesEnabled }, loadWorld().agent.grantedTools);
  const instructions = instructionsFor(wf.pack);
  // Counted before the transcript is read: a follow-up committed after this count may be missing
  // from the input, and the round is then re-run with it (recordRound).
  const userMessagesSent = await countUserMessages(db, wf.id);
  const input = await loadTranscript(db, wf.id);
  const started = Date.now();
  const response = await askModel(deps, wf, budget, { instructions, input, tools: offered.map(toFunctionTool) }, started);
  if (response === 'model_error') return response;

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
    .map((c) => ({ call_id: escapeUnstorable(c.call_id), name: escapeUnstorable(c.name), arguments: escapeUnstorable(c.arguments) }));
  const answer = { wf, round: job.round, response, input, instructionsHash: instructions.hash, functionCalls: calls.length, started };
  const rows = await recordRound(deps, answer, { calls, userMessagesSent, writesEnabled }).catch((err: unknown) => {
    if (!(err instanceof CallIdReused || err instanceof CallIdRefused)) throw err;
    return stopForCallIds(deps, answer, calls, err);
  });
  if (rows === 'transcript_changed') throw new TranscriptChanged(wf.id, job.round);
  await deps.relay.publish(rows);
  return rows.length ? `proposed:${rows.length}` : 'recorded';
}
