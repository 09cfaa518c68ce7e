import OpenAI from 'openai';
import { fetchCapped } from '@gatehouse/contracts';

/** The model-stub's Responses API on its default port (docs/product/public-contract.md#model-stub). */
export const LOCAL_MODEL_STUB_URL = 'http://127.0.0.1:7103/v1';

/**
 * The official `openai` client pointed at `baseURL` (the model-stub locally). Retries 429/5xx
 * and timeouts itself (`maxRetries`, honouring `retry-after-ms`); a 400 surfaces as
 * `OpenAI.BadRequestError`. With `OPENAI_API_KEY` set and `baseURL` unset, the same code talks
 * to the real API. Response bodies are read with the downstream cap (`fetchCapped`): an oversized
 * answer fails the request instead of growing memory.
 */
export function createModelClient(opts: { apiKey: string; baseURL: string | undefined; timeoutMs: number }): OpenAI {
  return new OpenAI({
    apiKey: opts.apiKey,
    baseURL: opts.baseURL,
    timeout: opts.timeoutMs,
    maxRetries: 2,
    fetch: (url, init) => fetchCapped(url, init),
  });
}
