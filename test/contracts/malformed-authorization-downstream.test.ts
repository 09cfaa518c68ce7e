import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer, createLogger, listen } from '@gatehouse/platform';
import { newDelegationKeyPair } from '@gatehouse/credentials';
import { createStagingApp, ensureStagingSchema, openStagingDatabase } from '@gatehouse/staging';
import { createModelStubApp } from '@gatehouse/model-stub';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

/**
 * The staging systems of record and the model-stub each read the `Authorization` header with
 * their own pattern: staging answered `401 missing_token` for `Bearer <token> extra` or
 * `Basic …` (as if none were sent), and the model-stub took `Bearer a b` as a key. Both now use
 * the platform's one parser (`bearerTokenOf`, docs/decisions/0747): staging answers `401
 * malformed_authorization` naming what is wrong, nothing written; the model-stub refuses it with
 * the API's own 401 `invalid_api_key` carrying that reason (docs/decisions/0752). Neither repeats
 * the token; no header at all is still `missing_token` / `invalid_api_key`.
 */

const TOKEN = 'tok-canary-4f1d';
const MALFORMED: Array<[string, string, RegExp]> = [
  ['a word after the token', `Bearer ${TOKEN} extra`, /2 words after Bearer, not one token/],
  ['another scheme', `Basic ${TOKEN}`, /its scheme is not Bearer/],
  ['the token alone', TOKEN, /it has no scheme/],
  ['Bearer alone', 'Bearer', /it has no token after Bearer/],
];

let tdb: TestDatabase;
let staging: { server: Server; url: string; close: () => Promise<void> };
let stub: { server: Server; url: string };
beforeAll(async () => {
  tdb = await createTestDatabase();
  const { db } = openStagingDatabase(tdb.url, { maxConnections: 4 });
  await ensureStagingSchema(db);
  const log = createLogger('malformed-authorization-test');
  log.level = 'silent';
  const keys = await newDelegationKeyPair();
  const s = await listen(createStagingApp({ db, delegationJwks: keys.jwks, log }).app, 0);
  staging = { server: s.server, url: `http://127.0.0.1:${s.port}`, close: () => db.destroy() };
  const m = await listen(createModelStubApp({ log }).app, 0);
  stub = { server: m.server, url: `http://127.0.0.1:${m.port}` };
});
afterAll(async () => {
  if (stub) await closeServer(stub.server);
  if (staging) await closeServer(staging.server);
  await staging?.close();
  await tdb?.drop();
});

async function post(url: string, authorization: string | undefined, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers, ...(authorization === undefined ? {} : { authorization }) },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: (await r.json()) as { error?: { reason?: string; code?: string; message: string } } };
}

describe('a malformed Authorization header downstream', () => {
  it('staging: 401 malformed_authorization naming what is wrong, never the token; nothing written', async () => {
    const refund = (auth: string | undefined) =>
      post(`${staging.url}/ledger/refunds`, auth, { orderId: 'O-1001', amountCents: 100, reason: 'x' }, { 'idempotency-key': 'k-auth-1' });
    for (const [what, header, problem] of MALFORMED) {
      const r = await refund(header);
      expect(r.status, what).toBe(401);
      expect(r.body.error?.reason, what).toBe('malformed_authorization');
      expect(r.body.error?.message, what).toMatch(problem);
      expect(r.body.error?.message, what).not.toContain(TOKEN);
    }
    const none = await refund(undefined);
    expect(none.status).toBe(401);
    expect(none.body.error?.reason).toBe('missing_token');
    // A well-formed header (any case, extra spaces) reaches the token check.
    const wellFormed = await refund(`bearer   ${TOKEN}`);
    expect(wellFormed.status).toBe(401);
    expect(wellFormed.body.error?.reason).toMatch(/^invalid_token/);
    const refunds = (await (await fetch(`${staging.url}/ledger/refunds?orderId=O-1001`)).json()) as { refunds: unknown[] };
    expect(refunds.refunds).toEqual([]);
  });

  it('model-stub: 401 invalid_api_key naming what is wrong, never the key; the well-formed header is taken', async () => {
    const respond = (auth: string | undefined) => post(`${stub.url}/v1/responses`, auth, { model: 'm', input: 'hi', store: false });
    for (const [what, header, problem] of MALFORMED) {
      const r = await respond(header);
      expect(r.status, what).toBe(401);
      expect(r.body.error?.code, what).toBe('invalid_api_key');
      expect(r.body.error?.message, what).toMatch(problem);
      expect(r.body.error?.message, what).not.toContain(TOKEN);
    }
    const none = await respond(undefined);
    expect(none.status).toBe(401);
    expect(none.body.error?.code).toBe('invalid_api_key');
    const ok = await respond(`bearer   ${TOKEN}`);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });
});
