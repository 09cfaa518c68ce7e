import { Router, type Request, type Response } from 'express';
import { bearerTokenOf, Unauthorized, type Logger } from '@gatehouse/platform';
import { apiError, apiErrorForStatus } from '../domain/api-error.ts';
import type { FixtureEntry } from '../domain/fixture-store.ts';
import { normalizeInput } from '../domain/input-items.ts';
import { checkPairing } from '../domain/pairing.ts';
import { eligibleTools, planNextStep } from '../domain/planner.ts';
import type { RequestRecord } from '../domain/request-log.ts';
import { buildResponse, functionCallItem, messageItem, newId, refusalItem, type OutputItem } from '../domain/response-factory.ts';
import type { ModelStubState } from '../domain/stub-state.ts';
import { parseResponsesBody } from './responses.schema.ts';
import { checkReasoning } from '../domain/reasoning.ts';

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function stringRecord(v: unknown): Record<string, string> | null {
  if (!isRecord(v)) return null;
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

/** What the request log keeps of a request, read defensively (the body may be invalid). */
function recordOf(req: Request, body: Record<string, unknown>, requestId: string): RequestRecord {
  const retry = Number(req.get('x-stainless-retry-count'));
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return {
    at: new Date().toISOString(),
    requestId,
    metadata: stringRecord(body.metadata),
    model: typeof body.model === 'string' ? body.model : null,
    tools: tools.map((t: unknown) => (isRecord(t) ? String(t.name ?? t.type) : '?')),
    toolChoice: body.tool_choice ?? null,
    input: body.input ?? null,
    instructions: typeof body.instructions === 'string' ? body.instructions : null,
    status: 0,
    retryCount: req.get('x-stainless-retry-count') !== undefined && Number.isFinite(retry) ? retry : null,
    responseId: null,
    include: Array.isArray(body.include) ? body.include.map(String) : [],
    reasoning: null,
  };
}

/**
 * Why the request's `Authorization` header carries no key — absent, or not `Bearer <key>` by the
 * platform's one parser ({@link bearerTokenOf}, whose message names what is wrong) — or null when
 * it carries one. The key itself is never checked, logged or repeated
 * (docs/decisions/0752-staging-and-the-model-stub-read-authorization-with-the-one-parser.md).
 */
function authorizationProblem(req: Request): string | null {
  try {
    return bearerTokenOf(req.get('authorization')) ? null : 'the Authorization header must be "Bearer <key>"';
  } catch (err) {
    if (err instanceof Unauthorized) return err.message;
    throw err;
  }
}

function fixtureOutput(entry: Exclude<FixtureEntry, { type: 'error' }>): OutputItem[] {
  switch (entry.type) {
    case 'function_calls':
      return entry.calls.map((c) => functionCallItem(c.name, c.arguments, c.call_id));
    case 'message':
      return [messageItem(entry.text)];
    case 'refusal':
      return [refusalItem(entry.text)];
  }
}

/**
 * `POST /v1/responses` (mount under `/v1`): auth (401 `invalid_api_key`), body validation
 * (400 API error shape), `previous_response_id` (400 `previous_response_not_found`: the stub is
 * stateless) and `stream: true` (400) refusals, the reasoning-item check (400 for an unstored
 * item without `encrypted_content`; left-out or misplaced items recorded), the call_id pairing
 * check (400, recorded per ticket), then the ticket's next fixture, else the obedient planner.
 * Function calls are preceded by a reasoning item (encrypted with `include:
 * ['reasoning.encrypted_content']`). Every request is logged
 * with the status returned; every reply carries `x-request-id`.
 */
export function createResponsesRouter(state: ModelStubState, log: Logger): Router {
  const router = Router();
  router.post('/responses', (req: Request, res: Response) => {
    const requestId = newId('req');
    const raw = isRecord(req.body) ? req.body : {};
    const record = state.requests.add(recordOf(req, raw, requestId));
    const reply = (status: number, payload: unknown, headers: Record<string, string> = {}): void => {
      record.status = status;
      res.set('x-request-id', requestId);
      res.set(headers);
      res.status(status).json(payload);
    };

    const authProblem = authorizationProblem(req);
    if (authProblem) {
      reply(401, apiError(`Incorrect API key provided: ${authProblem}.`, { code: 'invalid_api_key' }));
      return;
    }
    const parsed = parseResponsesBody(req.body);
    if (!parsed.ok) return reply(400, parsed.error);
    const body = parsed.body;
    if (body.previous_response_id) {
      reply(
        400,
        apiError(`Previous response with id '${body.previous_response_id}' not found.`, {
          param: 'previous_response_id',
          code: 'previous_response_not_found',
        }),
      );
      return;
    }
    if (body.stream) {
      reply(
        400,
        apiError('Streaming is not supported by the model-stub; send stream: false.', { param: 'stream', code: 'unsupported_value' }),
      );
      return;
    }
    const input = normalizeInput(body.input);
    if (!input.ok) return reply(400, input.error);
    // `store` defaults to true in the API; with false, reasoning items must come back encrypted.
    const reasoning = checkReasoning(body.input, { store: body.store !== false, issued: state.reasoning });
    if (!reasoning.ok) return reply(400, reasoning.error);
    record.reasoning = reasoning.report;

    const ticketId = body.metadata?.ticket_id;
    const violation = checkPairing(input.items);
    if (violation) {
      state.requests.addPairingError({
        at: record.at,
        ticketId: ticketId ?? null,
        workflowId: body.metadata?.workflow_id ?? null,
        callId: violation.callId,
        message: violation.message,
      });
      log.warn({ ticketId, callId: violation.callId, reason: violation.reason }, 'call_id pairing violated');
      return reply(400, apiError(violation.message, { param: 'input' }));
    }

    let output: OutputItem[];
    const fixture = state.fixtures.next(ticketId);
    if (fixture?.type === 'error') {
      const payload = fixture.body ?? apiErrorForStatus(fixture.status);
      if (fixture.body === undefined && fixture.message !== undefined)
        (payload as { error: { message: string } }).error.message = fixture.message;
      return reply(fixture.status, payload, fixture.headers);
    } else if (fixture) {
      output = fixtureOutput(fixture);
    } else {
      const step = planNextStep({ items: input.items, tools: eligibleTools(body.tools, body.tool_choice) });
      output = [step.type === 'message' ? messageItem(step.text) : functionCallItem(step.name, JSON.stringify(step.arguments))];
    }
    // A reasoning model thinks before it calls: one reasoning item precedes the function calls.
    const callIds = output.flatMap((o) => (o.type === 'function_call' ? [o.call_id] : []));
    if (callIds.length) {
      const item = state.reasoning.issue(callIds, (body.include ?? []).includes('reasoning.encrypted_content'));
      output = [item, ...output];
      record.reasoning.emitted = { id: item.id, precedes: callIds };
    }
    const built = buildResponse(body, output);
    const response = fixture
      ? { ...built, id: fixture.id ?? built.id, model: fixture.model ?? built.model, usage: { ...built.usage, ...fixture.usage } }
      : built;
    record.responseId = response.id;
    reply(200, response);
  });
  return router;
}
