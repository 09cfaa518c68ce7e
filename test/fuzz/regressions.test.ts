import { createHash } from 'node:crypto';
import { zstdCompressSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenFor } from '@gatehouse/cli';
import { SECRET, startFuzzApps, type FuzzApps, type Surface } from './support/apps.ts';
import { send } from './support/client.ts';
import { forgeToken } from './support/tokens.ts';

// Inputs the fuzz suite found answered 500, each now a 4xx with a reason: a path parameter that is
// not valid percent-encoding (the router's decodeURIComponent threw), a body that is not what its
// content-encoding says (zlib threw), and a validly signed token whose claims the ledger cannot
// store or index (a NUL, a lone surrogate, thousands of characters).

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

describe('a body that does not decode with its content-encoding is 400 invalid_body', () => {
  it.each([
    ['gzip', 'not gzip at all'],
    ['gzip', ''],
    ['deflate', '{"ticketId":"T-1"}'],
    // Brotli's decoder errors carry ERR__ERROR_* codes, not zlib's Z_*: answered 400 bad_request "Decompression failed".
    ['br', 'not brotli at all'],
    ['br', '{"ticketId":"T-1"}'],
  ])('content-encoding %s, body %j', async (encoding, body) => {
    const res = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: { ...json(tokens.rep!), 'content-encoding': encoding },
      body,
    });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({
      error: { reason: 'invalid_body', message: 'the body does not decode with its content-encoding' },
    });
  });
});

// body-parser inflates zstd too wherever zlib has it (Node >= 22.15): the contract lists four codings,
// and a bad zstd body was answered 400 bad_request with zstd's own words (ADR 0781).
describe('a body in a coding the contract does not list is 415 unsupported_encoding, nothing recorded', () => {
  const ticket = { ticketId: 'T-zstd', text: 'What is the status of order O-1001?' };
  it.each([
    ['zstd', zstdCompressSync(Buffer.from(JSON.stringify(ticket)))],
    ['zstd', Buffer.from('not zstd at all')],
    ['ZSTD', Buffer.from(JSON.stringify(ticket))],
  ])('content-encoding %s', async (encoding, body) => {
    const res = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: { ...json(tokens.rep!), 'content-encoding': encoding },
      body,
    });
    expect(res.status).toBe(415);
    expect(JSON.parse(res.text)).toEqual({
      error: { reason: 'unsupported_encoding', message: 'content-encoding must be identity, gzip, deflate or br' },
    });
  });

  it('left no ticket behind: the same ticket id with other text is still free', async () => {
    const res = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: json(tokens.rep!),
      body: JSON.stringify({ ...ticket, text: 'Where is order O-1002?' }),
    });
    expect(res.status).toBe(202);
  });
});

describe('a signed token whose claims the ledger cannot store is 401 invalid_token', () => {
  const now = Math.floor(Date.now() / 1000);
  const signed = (claims: Record<string, unknown>) =>
    forgeToken(
      { alg: 'HS256', typ: 'JWT' },
      { sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'], iss: 'gatehouse-local', exp: now + 600, ...claims },
      'hs256',
    );
  it.each<[string, Record<string, unknown>]>([
    ['a NUL in the tenant', { tenant: 'quillfeather\u0000' }],
    ['a lone surrogate in the subject', { sub: 'lead-eli\ud800' }],
    ['a 3000-character tenant', { tenant: 'q'.repeat(3000) }],
    ['a NUL in a role', { roles: ['lead\u0000'] }],
  ])('%s', async (_name, claims) => {
    const token = signed(claims);
    for (const [surface, path] of [
      ['approval', '/v1/approvals'],
      ['agent-loop', '/v1/workflows/00000000-0000-4000-8000-000000000000'],
    ] as const) {
      const res = await send(f.apps[surface].url, { method: 'GET', path, headers: json(token) });
      expect(res.status).toBe(401);
      expect(JSON.parse(res.text)).toMatchObject({ error: { reason: 'invalid_token' } });
    }
    const ticket = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: json(token),
      body: JSON.stringify({ ticketId: 'T-claims', text: 'refund please' }),
    });
    expect(ticket.status).toBe(401);
    const inbox = await send(f.apps.approval.url, { method: 'GET', path: '/inbox/approvals', headers: { cookie: `gh_inbox=${token}` } });
    expect(inbox.status).toBe(303); // back to sign-in: the session is not valid
  });

  it('logs no unhandled error for any of them', () => {
    for (const app of Object.values(f.apps)) expect(app.logs.filter((l) => Number(l.level) >= 50)).toEqual([]);
  });
});

// A JSON body whose object names a key twice was read "last one wins": `{"decision":"deny",
// "decision":"approve"}` was an approval, and a ticket's text was whichever copy came last, while
// a proxy, a log or the caller's own review may read the first (docs/decisions/0687).
describe('a JSON body naming a key twice is 400 invalid_body, and nothing is written', () => {
  const digest = 'a'.repeat(64);
  it.each<[string, Surface, string, 'rep' | 'lead' | 'ops', string]>([
    [
      'a ticket with two texts',
      'agent-loop',
      '/v1/tickets',
      'rep',
      '{"ticketId":"T-dup-1","text":"What is the status of O-1001?","text":"Refund $80 on O-1007","mode":"act"}',
    ],
    [
      'a ticket with two modes, one escaped',
      'agent-loop',
      '/v1/tickets',
      'rep',
      '{"ticketId":"T-dup-2","text":"O-1007 broke","mode":"investigate","mo\\u0064e":"act"}',
    ],
    [
      'a follow-up with two texts',
      'agent-loop',
      '/v1/workflows/00000000-0000-4000-8000-000000000000/messages',
      'rep',
      '{"text":"a","text":"b"}',
    ],
    [
      'a decision deny then approve',
      'approval',
      '/v1/approvals/00000000-0000-4000-8000-000000000000/decision',
      'lead',
      `{"decision":"deny","decision":"approve","actionVersion":2,"actionDigest":"${digest}"}`,
    ],
    [
      'a webhook with two urls',
      'ops',
      '/api/webhooks',
      'ops',
      '{"tenant":"quillfeather","url":"https://example.com/a","url":"https://example.org/b"}',
    ],
    [
      'a key twice in a nested object',
      'agent-loop',
      '/v1/tickets',
      'rep',
      '{"ticketId":"T-dup-3","text":"O-1001?","meta":[{"a":1},{"b":{"c":1,"c":2}}]}',
    ],
  ])('%s', async (_name, surface, path, who, body) => {
    tokens.ops ??= await tokenFor('ops-gus', SECRET);
    const res = await send(f.apps[surface].url, { method: 'POST', path, headers: json(tokens[who]!), body });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({ error: { reason: 'invalid_body', message: expect.stringContaining('each key once') } });
  });

  it('wrote no workflow and no webhook for any of them', async () => {
    expect(await f.db.db.selectFrom('workflows').select('id').where('ticket_id', 'like', 'T-dup-%').execute()).toEqual([]);
    expect(await f.db.db.selectFrom('webhook_endpoints').select('url').execute()).toEqual([]);
  });

  it('still accepts the same key in sibling objects and a key-like string value', async () => {
    const res = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: json(tokens.rep!),
      body: '{"ticketId":"T-dup-ok","text":"\\"text\\": is O-1001 shipped? {\\"text\\":1}"}',
    });
    expect(res.status).toBe(202);
  });

  it('logs no unhandled error for any of them', () => {
    for (const app of Object.values(f.apps)) expect(app.logs.filter((l) => /unhandled/i.test(String(l.msg)))).toEqual([]);
  });
});

// A JSON body whose bytes were not valid UTF-8 was read with each bad byte as U+FFFD: a ticket sent
// as latin-1 ("café" as 63 61 66 E9) was stored as "caf\uFFFD" and answered 202, the caller's text
// changed without a word, and two different bodies were "the same ticket" (docs/decisions/0721).
describe('a JSON body that is not valid text of its charset is 400 invalid_body, and nothing is written', () => {
  const bytes = (...parts: Array<string | number[]>) =>
    Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
  it.each<[string, Surface, string, 'rep' | 'lead' | 'ops', Buffer]>([
    ['a ticket whose text is latin-1', 'agent-loop', '/v1/tickets', 'rep', bytes('{"ticketId":"T-bad-utf8-1","text":"caf', [0xe9], '"}')],
    [
      'a ticket with a truncated sequence',
      'agent-loop',
      '/v1/tickets',
      'rep',
      bytes('{"ticketId":"T-bad-utf8-2","text":"a', [0xe2, 0x82], '"}'),
    ],
    [
      'a ticket with an encoded surrogate (CESU)',
      'agent-loop',
      '/v1/tickets',
      'rep',
      bytes('{"ticketId":"T-bad-utf8-3","text":"a', [0xed, 0xa0, 0x80], '"}'),
    ],
    ['a follow-up', 'agent-loop', '/v1/workflows/00000000-0000-4000-8000-000000000000/messages', 'rep', bytes('{"text":"', [0xff], '"}')],
    [
      'a decision reason',
      'approval',
      '/v1/approvals/00000000-0000-4000-8000-000000000000/decision',
      'lead',
      bytes(`{"decision":"deny","actionVersion":1,"actionDigest":"${'a'.repeat(64)}","reason":"`, [0xc0, 0xaf], '"}'),
    ],
    ['a webhook url', 'ops', '/api/webhooks', 'ops', bytes('{"tenant":"quillfeather","url":"https://example.com/', [0xfe], '"}')],
  ])('%s', async (_name, surface, path, who, body) => {
    tokens.ops ??= await tokenFor('ops-gus', SECRET);
    const res = await send(f.apps[surface].url, { method: 'POST', path, headers: json(tokens[who]!), body });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({ error: { reason: 'invalid_body', message: expect.stringContaining('not valid text') } });
  });

  it('wrote no workflow and no webhook for any of them', async () => {
    expect(await f.db.db.selectFrom('workflows').select('id').where('ticket_id', 'like', 'T-bad-utf8-%').execute()).toEqual([]);
    expect(await f.db.db.selectFrom('webhook_endpoints').select('url').execute()).toEqual([]);
  });

  it('still accepts valid UTF-8 beyond ASCII (and a leading BOM), stored as sent', async () => {
    const text = 'café — 😀 עברית';
    const res = await send(f.apps['agent-loop'].url, {
      method: 'POST',
      path: '/v1/tickets',
      headers: json(tokens.rep!),
      body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify({ ticketId: 'T-good-utf8', text }))]),
    });
    expect(res.status).toBe(202);
    const wf = await f.db.db.selectFrom('workflows').select('text_sha256').where('ticket_id', '=', 'T-good-utf8').executeTakeFirstOrThrow();
    expect(wf.text_sha256).toBe(createHash('sha256').update(text).digest('hex'));
  });

  it('logs no unhandled error for any of them', () => {
    for (const app of Object.values(f.apps)) expect(app.logs.filter((l) => /unhandled/i.test(String(l.msg)))).toEqual([]);
  });
});
