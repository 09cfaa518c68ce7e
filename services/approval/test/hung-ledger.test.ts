import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { signUserToken } from '@gatehouse/credentials';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, listen } from '@gatehouse/platform';
import { startHangableProxy, type HangableProxy, timedGet, type TimedAnswer } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// A ledger that accepts connections and never answers (a SIGSTOPped or wedged Postgres) must not
// hold an approver's browser: the inbox's pages answer 503 within HTTP_RESPONSE_DEADLINE_MS, as
// the API does, with a page saying a decision just sent may still be recorded.

const DEADLINE_MS = 800;
let hung: HangableProxy;
let db: Db;
let server: Server;
let url: string;
let cookie: string;

beforeAll(async () => {
  hung = await startHangableProxy(); // no target: nothing ever answers
  db = createDb(`postgres://postgres@127.0.0.1:${hung.port}/gatehouse`, 2);
  const app = testApprovalApp(db, 'approval-hung-ledger-test', { responseDeadlineMs: DEADLINE_MS });
  ({ server, url } = await listen(app, 0, '127.0.0.1').then((l) => ({ server: l.server, url: `http://127.0.0.1:${l.port}` })));
  // The session cookie a sign-in sets (signing in now reads the ledger too — its revocations, ADR 0695 —
  // so over this ledger it answers 503 like the rest): the inbox's own reads are under test here.
  const lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  cookie = `gh_inbox=${lead}`;
});
afterAll(async () => {
  await hung?.close();
  if (server) await closeServer(server);
  await db?.destroy().catch(() => undefined);
});

/** GET `path` of the service under test as its user ({@link timedGet}). */
const get = (path: string): Promise<TimedAnswer> => timedGet(`${url}${path}`, { cookie });

describe('the inbox over a ledger that never answers', () => {
  it('answers its page 503 with Retry-After within the deadline instead of hanging', async () => {
    const r = await get('/inbox/approvals');
    expect(r.status, 'no answer: the inbox hung').toBe(503);
    expect(r.type).toMatch(/^text\/html/);
    expect(r.retryAfter).toBe('5');
    expect(r.text).toContain('may still be recorded');
    expect(r.ms).toBeLessThan(DEADLINE_MS + 2000);
  }, 20_000);

  it('the API answers 503 dependency_unavailable as before', async () => {
    const lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
    const r = await fetch(`${url}/v1/approvals?status=pending`, {
      headers: { authorization: `Bearer ${lead}` },
      signal: AbortSignal.timeout(8000),
    });
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { reason: string } }).error.reason).toBe('dependency_unavailable');
  }, 20_000);
});
