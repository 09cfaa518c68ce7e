import { z } from 'zod';
import { apiError, type ApiErrorBody } from '../domain/api-error.ts';

/**
 * The `POST /v1/responses` body fields the stub reads, as the `openai` v7 client and
 * openai-agents-js send them (OpenAI API reference, "Create a model response"). Unknown fields are accepted.
 */
export const ResponsesBodySchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.unknown())]),
  instructions: z.string().nullish(),
  tools: z.array(z.looseObject({ type: z.string(), name: z.string().optional() })).optional(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string() })]).optional(),
  parallel_tool_calls: z.boolean().nullish(),
  store: z.boolean().nullish(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  previous_response_id: z.string().nullish(),
  stream: z.boolean().nullish(),
  max_output_tokens: z.number().int().nullish(),
  include: z.array(z.string()).nullish(),
});

/** A validated `POST /v1/responses` body. */
export type ResponsesBody = z.output<typeof ResponsesBodySchema>;

/** `["tools", 0, "name"]` → `tools[0].name`, the way the API names a `param`. */
function paramOf(path: ReadonlyArray<PropertyKey>): string {
  return path.reduce<string>((acc, seg) => (typeof seg === 'number' ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)), '');
}

function valueAt(body: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let v: unknown = body;
  for (const seg of path) {
    if (typeof v !== 'object' || v === null) return undefined;
    v = (v as Record<PropertyKey, unknown>)[seg];
  }
  return v;
}

/**
 * Validates a request body; on failure returns the API's 400 body for the first problem
 * (`missing_required_parameter` or `invalid_value`, `param` naming the field).
 */
export function parseResponsesBody(body: unknown): { ok: true; body: ResponsesBody } | { ok: false; error: ApiErrorBody } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, error: apiError('The request body must be a JSON object.', { code: 'invalid_value' }) };
  }
  const r = ResponsesBodySchema.safeParse(body);
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = issue?.path ?? [];
    const param = paramOf(path);
    if (valueAt(body, path) === undefined) {
      return { ok: false, error: apiError(`Missing required parameter: '${param}'.`, { param, code: 'missing_required_parameter' }) };
    }
    return {
      ok: false,
      error: apiError(`Invalid value for '${param}': ${issue?.message ?? 'invalid'}.`, { param, code: 'invalid_value' }),
    };
  }
  for (const [i, tool] of (r.data.tools ?? []).entries()) {
    if (tool.type === 'function' && !tool.name) {
      const param = `tools[${i}].name`;
      return { ok: false, error: apiError(`Missing required parameter: '${param}'.`, { param, code: 'missing_required_parameter' }) };
    }
  }
  return { ok: true, body: r.data };
}
