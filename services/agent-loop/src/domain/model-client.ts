import OpenAI from 'openai';

/** The model-stub's Responses API on its default port (docs/product/public-contract.md#model-stub). */
export const LOCAL_MODEL_STUB_URL = 'http://127.0.0.1:7103/v1';

/**
 * The official `openai` client pointed at `baseURL` (the model-stub locally). Retries 429/5xx
 * and timeouts itself (`maxRetries`, honouring `retry-after-ms`); a 400 surfaces as
 * `OpenAI.BadRequestError`. With `OPENAI_API_KEY` set and `baseURL` unset, the same code talks
 * to the real API.
 */
export function createModelClient(opts: { apiKey: string; baseURL: string | undefined; timeoutMs: number }): OpenAI {
  return new OpenAI({ apiKey: opts.apiKey, baseURL: opts.baseURL, timeout: opts.timeoutMs, maxRetries: 2 });
}
