import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { signUserToken } from '@gatehouse/credentials';
import {
  browserSession,
  createLogger,
  escapeHtml,
  finishApp,
  pageFrame,
  setPageHeaders,
  signInForm,
  type BearerVerifier,
} from '../src/index.ts';

// The browser session shared by the approval inbox and the ops dashboard
// (docs/decisions/0290-one-error-tree-and-browser-session.md): cookie attributes, sign-in, CSRF,
// escaping and page headers, on a small app built the way both surfaces use it.

const SECRET = 'browser-session-test-secret-of-32-bytes!';
const verifier: BearerVerifier = { secret: SECRET };

/** A surface with a sign-in, one protected page and one state-changing form. */
function surface(secureCookie: boolean) {
  const session = browserSession({ cookie: 'gh_test', path: '/t', verifier, csrfKey: 'csrf-key', localSecret: SECRET, secureCookie });
  const app = express();
  app.post('/t/session', session.form, async (req, res) => {
    setPageHeaders(res);
    const outcome = await session.signIn(req, res);
    if (outcome.kind === 'answered') return;
    if (outcome.kind === 'refused') {
      res
        .status(401)
        .type('html')
        .send(pageFrame('Sign in', signInForm('/t/session', session.chooserUsers()), ''));
      return;
    }
    session.set(res, outcome.token);
    res.redirect(303, '/t/page');
  });
  app.get('/t/page', async (req, res) => {
    setPageHeaders(res);
    const s = await session.read(req);
    if (!s) return void res.redirect(303, '/t/session');
    res
      .type('html')
      .send(pageFrame(`<${s.user.sub}>`, `<p data-csrf="${escapeHtml(session.csrfOf(s.token))}">${escapeHtml(s.user.sub)}</p>`, ''));
  });
  app.post('/t/act', session.form, async (req, res) => {
    const s = await session.read(req);
    if (!s) return void res.status(401).send('signed out');
    if (!session.csrfValid(s.token, (req.body as { csrf?: unknown }).csrf)) return void res.status(403).send('csrf');
    res.send('done');
  });
  app.get('/t/signout', (_req, res) => {
    session.set(res, null);
    res.redirect(303, '/t/session');
  });
  return { app: finishApp(app, createLogger('browser-session-test')), session };
}

async function signIn(app: express.Express, userId = 'lead-eli'): Promise<string> {
  const res = await request(app).post('/t/session').type('form').send({ userId }).expect(303);
  return String(res.headers['set-cookie']![0]);
}

describe('browser session cookies', () => {
  it('are HttpOnly, SameSite=Strict, scoped to the path, one hour, and Secure when asked (production)', async () => {
    const cookie = await signIn(surface(true).app);
    expect(cookie).toMatch(/^gh_test=[\w-]+\.[\w-]+\.[\w-]+;/);
    expect(cookie).toMatch(/;\s*HttpOnly/i);
    expect(cookie).toMatch(/;\s*SameSite=Strict/i);
    expect(cookie).toMatch(/;\s*Path=\/t(;|$)/);
    expect(cookie).toMatch(/;\s*Max-Age=3600/);
    expect(cookie).toMatch(/;\s*Secure/i);
  });

  it('are not Secure when not asked, so local http keeps working', async () => {
    const cookie = await signIn(surface(false).app);
    expect(cookie).toMatch(/;\s*HttpOnly/i);
    expect(cookie).not.toMatch(/;\s*Secure/i);
  });

  it('sign-out clears the cookie with the same attributes', async () => {
    const res = await request(surface(true).app).get('/t/signout').expect(303);
    const cookie = String(res.headers['set-cookie']![0]);
    expect(cookie).toMatch(/^gh_test=;/);
    expect(cookie).toMatch(/Max-Age=0/);
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Strict/i);
  });

  it('an unknown user or a forged token is refused with 401 and no cookie', async () => {
    const { app } = surface(false);
    const unknown = await request(app).post('/t/session').type('form').send({ userId: 'nobody' }).expect(401);
    expect(unknown.headers['set-cookie']).toBeUndefined();
    const forged = await signUserToken(
      { sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] },
      'another-secret-of-at-least-32-bytes!!',
    );
    const pasted = await request(app).post('/t/session').type('form').send({ token: forged }).expect(401);
    expect(pasted.headers['set-cookie']).toBeUndefined();
  });

  it('a cookie whose token does not verify is no session', async () => {
    const { app } = surface(false);
    await request(app).get('/t/page').set('cookie', 'gh_test=not-a-token').expect(303);
  });
});

describe('CSRF', () => {
  it('a form without the token, or with another session’s, is refused; with its own it passes', async () => {
    const { app, session } = surface(false);
    const cookie = (await signIn(app)).split(';')[0]!;
    const other = (await signIn(app, 'rep-ana')).split(';')[0]!;
    await request(app).post('/t/act').set('cookie', cookie).type('form').send({}).expect(403);
    await request(app).post('/t/act').set('cookie', cookie).type('form').send({ csrf: '' }).expect(403);
    const otherToken = other.slice('gh_test='.length);
    await request(app)
      .post('/t/act')
      .set('cookie', cookie)
      .type('form')
      .send({ csrf: session.csrfOf(otherToken) })
      .expect(403);
    const page = await request(app).get('/t/page').set('cookie', cookie).expect(200);
    const csrf = /data-csrf="([0-9a-f]{64})"/.exec(page.text)![1]!;
    await request(app).post('/t/act').set('cookie', cookie).type('form').send({ csrf }).expect(200, 'done');
  });

  it('csrfValid refuses anything but the session token’s own HMAC', () => {
    const { session } = surface(false);
    const good = session.csrfOf('token-a');
    expect(session.csrfValid('token-a', good)).toBe(true);
    expect(session.csrfValid('token-b', good)).toBe(false);
    expect(session.csrfValid('token-a', good.slice(1))).toBe(false);
    expect(session.csrfValid('token-a', undefined)).toBe(false);
    expect(session.csrfValid('token-a', [good])).toBe(false);
  });
});

describe('pages', () => {
  it('escapes every markup character, in text and attributes', () => {
    expect(escapeHtml(`<img src=x onerror="a('b')">&\``)).toBe('&#60;img src=x onerror=&#34;a(&#39;b&#39;)&#34;&#62;&#38;&#96;');
    expect(escapeHtml(42)).toBe('42');
    const html = pageFrame('<script>t</script>', '<p>ok</p>', 'p{}');
    expect(html).toContain('<title>&#60;script&#62;t&#60;/script&#62;</title>');
    expect(html).not.toMatch(/<script/i);
    expect(signInForm('/t/session', [{ id: '"><script>', role: 'lead' }])).not.toContain('<script>');
  });

  it('carry the no-script CSP, nosniff and no referrer', async () => {
    const { app } = surface(false);
    const cookie = (await signIn(app)).split(';')[0]!;
    const res = await request(app).get('/t/page').set('cookie', cookie).expect(200);
    expect(res.headers['content-security-policy']).toBe(
      "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    );
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    expect(res.text).toContain('<title>&#60;lead-eli&#62;</title>');
  });
});
