/**
 * The OpenAI API error body, `{"error": {"message", "type", "param", "code"}}`. The `openai`
 * client reads `error.message` into `"<status> <message>"` and exposes `type`, `param`, `code`.
 * Source: openai-node `src/core/error.ts` (`APIError.generate`).
 */
export type ApiErrorBody = {
  error: { message: string; type: string; param: string | null; code: string | null };
};

/**
 * Builds an API error body; `type` defaults to `invalid_request_error`, `param` and `code` to
 * null.
 */
export function apiError(message: string, opts: { type?: string; param?: string | null; code?: string | null } = {}): ApiErrorBody {
  return {
    error: {
      message,
      type: opts.type ?? 'invalid_request_error',
      param: opts.param ?? null,
      code: opts.code ?? null,
    },
  };
}

/**
 * The default error body for an HTTP status, as the real API would phrase it: 429 →
 * `rate_limit_exceeded`, 5xx → `server_error`, 401 → `invalid_api_key`, other 4xx →
 * `invalid_request_error`.
 */
export function apiErrorForStatus(status: number): ApiErrorBody {
  if (status === 429) {
    return apiError('Rate limit reached (model-stub fixture).', { type: 'requests', code: 'rate_limit_exceeded' });
  }
  if (status === 401) return apiError('Incorrect API key provided (model-stub fixture).', { code: 'invalid_api_key' });
  if (status >= 500) {
    return apiError('The server had an error while processing your request (model-stub fixture).', {
      type: 'server_error',
    });
  }
  return apiError(`Request failed with status ${status} (model-stub fixture).`);
}
