import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { SECRET, startFuzzApps, type FuzzApps, type Surface } from '../fuzz/support/apps.ts';

/**
 * A known path called with a method none of its routes takes (DELETE /v1/tickets, PATCH
 * /v1/workflows/:id) was answered 404 "no route", as if the path did not exist. It is 405
 * `method_not_allowed` with `Allow` naming the path's methods (RFC 9110 §15.5.6; packages/platform
 * `finishApp`, docs/decisions/0746), on every service; nothing is written. An unknown path stays 404.
 */

let f: FuzzApps;
let token: string;
beforeAll(async () => {
  f = await startFuzzApps();
  token = await tokenFor('lead-eli', SECRET);
});
afterAll(async () => {
  await f?.close();
});

async function call(surface: Surface, method: string, path: string) {
  const r = await fetch(f.apps[surface].url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(method === 'GET' || method === 'HEAD' ? {} : { body: JSON.stringify({ ticketId: 'T-405', text: 'refund please' }) }),
  });
  const text = await r.text();
  return {
    status: r.status,
    allow: r.headers.get('allow'),
    body: (text ? JSON.parse(text) : {}) as { error?: { reason: string; message: string } },
  };
}

const WORKFLOW = '00000000-0000-4000-8000-000000000000';
const APPROVAL = '00000000-0000-4000-8000-000000000001';
const CASES: Array<[Surface, string, string, string]> = [
  ['agent-loop', 'DELETE', '/v1/tickets', 'POST'],
  ['agent-loop', 'GET', '/v1/tickets', 'POST'],
  ['agent-loop', 'PATCH', `/v1/workflows/${WORKFLOW}`, 'GET, HEAD'],
  ['agent-loop', 'PUT', `/v1/workflows/${WORKFLOW}/messages`, 'POST'],
  ['approval', 'DELETE', `/v1/approvals/${APPROVAL}`, 'GET, HEAD'],
  ['approval', 'GET', `/v1/approvals/${APPROVAL}/decision`, 'POST'],
];

describe('a known path with a method it does not take', () => {
  for (const [surface, method, path, allow] of CASES) {
    it(`${surface}: ${method} ${path} is 405 with Allow: ${allow}`, async () => {
      const r = await call(surface, method, path);
      expect(r.status).toBe(405);
      expect(r.allow).toBe(allow);
      expect(r.body.error).toEqual({ reason: 'method_not_allowed', message: `${path} does not take ${method}: it takes ${allow}` });
    });
  }

  it('nothing was written, and an unknown path or a method the path takes still answers as before', async () => {
    expect(await f.db.db.selectFrom('workflows').select('id').execute()).toEqual([]);
    const unknown = await call('agent-loop', 'DELETE', '/v1/nothing-here');
    expect(unknown).toMatchObject({ status: 404, allow: null, body: { error: { reason: 'not_found' } } });
    const known = await call('agent-loop', 'GET', `/v1/workflows/${WORKFLOW}`);
    expect(known).toMatchObject({ status: 404, allow: null, body: { error: { reason: 'not_found' } } });
    const head = await call('approval', 'HEAD', `/v1/approvals/${APPROVAL}`);
    expect(head.status).toBe(404);
  });
});
