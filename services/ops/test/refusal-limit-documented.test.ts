import { describe, expect, it } from 'vitest';
import { opsOpenApi } from '@gatehouse/contracts';
import { AbuseLimiter } from '@gatehouse/platform';
import { tokenFor } from '@gatehouse/cli';
import { opsAppFixture, SECRET } from './support/ops-app.ts';

// Past the sign-in limits a non-operator's request to the ops API is answered 429 with
// Retry-After and a `rate_limited_*` reason (ADR 0725). The ops OpenAPI document listed 200, 400,
// 401, 403, 408, 413, 415, 431 and 503 for its operations, never 429: a generated client had no
// type for that answer. Every operation behind the operator check documents it now.

const app = opsAppFixture('ops-refusal-limit-documented-test', ({ redis, prefix }) => ({
  signInLimiter: new AbuseLimiter(redis, prefix, { surface: 'signin', perUser: 1, perTenant: 100, windowSeconds: 60 }),
}));

/** Every operation of the ops document that needs a bearer token, as `[METHOD, path, responses]`. */
function operations(): Array<[string, string, Record<string, unknown>]> {
  const out: Array<[string, string, Record<string, unknown>]> = [];
  for (const [path, item] of Object.entries(opsOpenApi().paths ?? {}))
    for (const [method, op] of Object.entries(item as Record<string, { security?: unknown[]; responses: Record<string, unknown> }>))
      if (!(Array.isArray(op.security) && op.security.length === 0)) out.push([method.toUpperCase(), path, op.responses]);
  return out;
}

describe('the ops API documents the 429 of a non-operator past the sign-in limits (ADR 0725)', () => {
  it('every operation answers it past the limit, and lists it with the ErrorBody schema', async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const headers = { authorization: `Bearer ${rep}`, 'content-type': 'application/json' };
    // The one refusal of the window the limit lets through (403, audited).
    expect((await fetch(`${app.url()}/api/overview`, { headers })).status).toBe(403);
    const seen: string[] = [];
    for (const [method, path, responses] of operations()) {
      const url = `${app.url()}${path.replace('{id}', '00000000-0000-4000-8000-000000000000')}`;
      const r = await fetch(url, { method, headers, ...(method === 'POST' ? { body: '{}' } : {}) });
      const body = (await r.json()) as { error?: { reason?: string; message?: string } };
      const name = `${method} ${path}`;
      expect([r.status, body.error?.reason], name).toEqual([429, 'rate_limited_user']);
      expect(Number(r.headers.get('retry-after')), name).toBeGreaterThan(0);
      expect(Object.keys(body), name).toEqual(['error']);
      expect(typeof body.error?.message, name).toBe('string');
      const documented = responses['429'] as { content?: Record<string, { schema: unknown }> } | undefined;
      expect(documented?.content?.['application/json']?.schema, `${name} documents 429`).toEqual({
        $ref: '#/components/schemas/ErrorBody',
      });
      seen.push(name);
    }
    expect(seen.length).toBeGreaterThanOrEqual(10);
  });
});
