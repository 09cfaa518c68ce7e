import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { SECRET, startFuzzApps, type FuzzApps, type Surface } from './support/apps.ts';
import { send } from './support/client.ts';

// A path parameter that is not valid percent-encoding is the caller's mistake: 400 with a reason,
// never a 500 from the router's decodeURIComponent.

let f: FuzzApps;
const tokens: Record<string, string> = {};
beforeAll(async () => {
  f = await startFuzzApps();
  tokens.rep = await tokenFor('rep-ana', SECRET);
  tokens.lead = await tokenFor('lead-eli', SECRET);
});
afterAll(async () => {
  await f?.close();
});

const json = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

describe('malformed percent-encoding in a path parameter is 400 bad_path', () => {
  it.each<[Surface, string, string, 'rep' | 'lead', object | undefined]>([
    ['approval', 'GET', '/v1/approvals/%', 'lead', undefined],
    ['approval', 'POST', '/v1/approvals/%/decision', 'lead', { decision: 'approve', actionVersion: 1, actionDigest: 'a'.repeat(64) }],
    ['agent-loop', 'GET', '/v1/workflows/%zz', 'rep', undefined],
    ['agent-loop', 'POST', '/v1/workflows/%/messages', 'rep', { text: 'one more thing' }],
    ['approval', 'GET', '/v1/approvals/%E0%A4%A', 'lead', undefined],
    ['approval', 'POST', '/inbox/approvals/%/decision', 'lead', undefined],
  ])('%s %s %s', async (surface, method, path, who, body) => {
    const res = await send(f.apps[surface].url, {
      method,
      path,
      headers: json(tokens[who]!),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({ error: { reason: 'bad_path', message: expect.stringContaining('percent-encoding') } });
  });

  it('logs no unhandled error for any of them', () => {
    for (const app of Object.values(f.apps)) expect(app.logs.filter((l) => /unhandled/i.test(String(l.msg)))).toEqual([]);
  });
});
