import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { SECRET, startFuzzApps, type FuzzApps, type Surface } from '../fuzz/support/apps.ts';

/**
 * An `Authorization` header that is there but not `Bearer <token>` (a word after the token,
 * another scheme, the token alone) was answered `401 missing_token` "a bearer token is required",
 * as if the client had sent none. It is `401 malformed_authorization` saying what is wrong with
 * the header (packages/platform `bearerTokenOf`, docs/decisions/0747), on every API; nothing is
 * written. No header at all is still `missing_token`.
 */

let f: FuzzApps;
let rep: string;
let ops: string;
beforeAll(async () => {
  f = await startFuzzApps();
  rep = await tokenFor('rep-ana', SECRET);
  ops = await tokenFor('ops-gus', SECRET);
});
afterAll(async () => {
  await f?.close();
});

const ROUTES: Record<Surface, { method: string; path: string; token: () => string }> = {
  'agent-loop': { method: 'POST', path: '/v1/tickets', token: () => rep },
  approval: { method: 'GET', path: '/v1/approvals', token: () => rep },
  ops: { method: 'GET', path: '/api/webhooks', token: () => ops },
};

async function call(surface: Surface, authorization: string | undefined) {
  const { method, path } = ROUTES[surface];
  const r = await fetch(f.apps[surface].url + path, {
    method,
    headers: { 'content-type': 'application/json', ...(authorization === undefined ? {} : { authorization }) },
    ...(method === 'POST' ? { body: JSON.stringify({ ticketId: 'T-AUTH', text: 'refund my order O-1002' }) } : {}),
  });
  return { status: r.status, body: (await r.json()) as { error?: { reason: string; message: string } } };
}

const MALFORMED: Array<[string, (t: string) => string, RegExp]> = [
  ['a word after the token', (t) => `Bearer ${t} extra`, /2 words after Bearer, not one token/],
  ['another scheme', (t) => `Basic ${t}`, /its scheme is not Bearer/],
  ['the token alone', (t) => t, /it has no scheme/],
  ['Bearer alone', () => 'Bearer', /it has no token after Bearer/],
];

describe('a malformed Authorization header', () => {
  for (const surface of Object.keys(ROUTES) as Surface[]) {
    it(`${surface}: 401 malformed_authorization naming what is wrong, never the token; none is missing_token`, async () => {
      const token = ROUTES[surface].token();
      for (const [what, header, problem] of MALFORMED) {
        const r = await call(surface, header(token));
        expect(r.status, what).toBe(401);
        expect(r.body.error?.reason, what).toBe('malformed_authorization');
        expect(r.body.error?.message, what).toMatch(problem);
        expect(r.body.error?.message, what).not.toContain(token);
      }
      const none = await call(surface, undefined);
      expect(none.status).toBe(401);
      expect(none.body.error?.reason).toBe('missing_token');
    });
  }

  it('nothing was written; the well-formed header (any case, extra spaces) is taken', async () => {
    expect(await f.db.db.selectFrom('workflows').select('id').execute()).toEqual([]);
    const ok = await call('agent-loop', `bearer   ${rep}`);
    expect(ok.status, JSON.stringify(ok.body)).toBeLessThan(300);
    expect(await f.db.db.selectFrom('workflows').select('ticket_id').execute()).toEqual([{ ticket_id: 'T-AUTH' }]);
  });
});
