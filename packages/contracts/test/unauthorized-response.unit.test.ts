import { describe, expect, it } from 'vitest';
import { approvalOpenApi, intakeOpenApi, opsOpenApi, type OpenApiDocument } from '../src/index.ts';

// The 401 of the OpenAPI documents said "missing or invalid token" only: a client reading them
// could not learn of `malformed_authorization` (a header not of the form `Bearer <token>`,
// docs/decisions/0747). Every documented 401 now names each reason the token check gives.
const DOCS: Record<string, () => OpenApiDocument> = { intake: intakeOpenApi, approval: approvalOpenApi, ops: opsOpenApi };

/** The description of every 401 response of `doc`, a `$ref` into `components.responses` followed. */
function unauthorizedDescriptions(doc: OpenApiDocument): string[] {
  const out: string[] = [];
  for (const item of Object.values(doc.paths ?? {}))
    for (const op of Object.values(item as Record<string, { responses?: Record<string, { $ref?: string; description?: string }> }>)) {
      const r = op.responses?.['401'];
      if (!r) continue;
      const ref = r.$ref?.replace('#/components/responses/', '');
      out.push(String((ref ? (doc.components?.responses?.[ref] as { description?: string }) : r).description));
    }
  return out;
}

describe('the documented 401', () => {
  for (const [name, doc] of Object.entries(DOCS)) {
    it(`${name}: every 401 names missing_token, malformed_authorization, invalid_token and token_revoked`, () => {
      const descriptions = unauthorizedDescriptions(doc());
      expect(descriptions.length).toBeGreaterThan(0);
      for (const d of descriptions)
        for (const reason of ['missing_token', 'malformed_authorization', 'invalid_token', 'token_revoked']) expect(d).toContain(reason);
    });
  }
});
