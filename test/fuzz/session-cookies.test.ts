import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFuzzApps, type FuzzApps } from './support/apps.ts';

// The approver inbox and the ops dashboard keep a bearer token in a session cookie: HttpOnly and
// SameSite=Strict always, and Secure in production (GATEHOUSE_ENV=production sets secureCookie),
// so the token never crosses plain HTTP. Both apps as their processes build them.

/** Signs in through `path` as `userId` (the local user chooser) and returns the Set-Cookie header. */
async function signIn(base: string, path: string, userId: string): Promise<string> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ userId }).toString(),
  });
  expect(res.status).toBe(303);
  return res.headers.get('set-cookie') ?? '';
}

describe.each([
  { secureCookie: true, expectSecure: true },
  { secureCookie: false, expectSecure: false },
])('session cookies with secureCookie=$secureCookie', ({ secureCookie, expectSecure }) => {
  let f: FuzzApps;
  beforeAll(async () => {
    f = await startFuzzApps({ secureCookie });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('the inbox session cookie', async () => {
    const cookie = await signIn(f.apps.approval.url, '/inbox/session', 'lead-eli');
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Strict/i);
    expect(/;\s*Secure/i.test(cookie)).toBe(expectSecure);
  });

  it('the ops dashboard session cookie', async () => {
    const cookie = await signIn(f.apps.ops.url, '/session', 'ops-gus');
    expect(cookie).toMatch(/HttpOnly/i);
    expect(/;\s*Secure/i.test(cookie)).toBe(expectSecure);
  });
});
