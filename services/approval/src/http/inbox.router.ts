import express, { Router, type Request, type Response } from 'express';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { parseCookie, stringifySetCookie } from 'cookie';
import { z } from 'zod';
import { loadWorld, storableString } from '@gatehouse/contracts';
import { signUserToken, InvalidTokenError, type UserClaims } from '@gatehouse/credentials';
import {
  claimedSubject,
  GatehouseError,
  httpStatusOf,
  sendRateRefusal,
  verifyBearerToken,
  type AbuseLimiter,
  type BearerVerifier,
  type OutboxRelay,
} from '@gatehouse/platform';
import type { Db } from '@gatehouse/ledger';
import { decideApproval } from '../domain/decide.ts';
import { selectApprovals, toView } from '../domain/approval-view.ts';
import { inboxPage, page, escapeHtml, signInPage } from './inbox.html.ts';

const COOKIE = 'gh_inbox';
const FormDecision = z.object({
  csrf: z.string(),
  decision: z.enum(['approve', 'deny']),
  actionVersion: z.coerce.number().int().positive(),
  actionDigest: z.string().regex(/^[0-9a-f]{64}$/),
  reason: storableString().max(500).optional(),
});

/** Settings of the inbox. `localUsers`: offer a user chooser (local mode only). */
export interface InboxConfig {
  db: Db;
  relay: OutboxRelay;
  auditHmacKey: string;
  verifier: BearerVerifier;
  /** Local HS256 secret used to sign chooser sessions; null in production (tokens are pasted). */
  localSecret: string | null;
  /** Mark the session cookie `Secure` (sent over HTTPS only): true in production. */
  secureCookie: boolean;
  /** Per-user and per-tenant limits of sign-in attempts (the process always passes one). */
  signInLimiter?: AbuseLimiter;
}

/**
 * The approver inbox (docs/product/public-contract.md#approvals): server-rendered pages, no script. Sign-in puts the bearer token
 * in an HttpOnly, SameSite=Strict cookie; every form carries a CSRF token (HMAC of the session
 * token) plus the action version and digest it was rendered with; every value is HTML-escaped,
 * so model-written text (e.g. a refund reason) is shown as text, never markup.
 */
export function inboxRouter(cfg: InboxConfig): Router {
  const router = Router();
  const form = express.urlencoded({ extended: false, limit: '16kb' });
  const csrfOf = (token: string) => createHmac('sha256', cfg.auditHmacKey).update(`csrf:${token}`).digest('hex');
  const secure = (res: Response) => {
    res.setHeader('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'");
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'no-referrer');
  };
  const session = async (req: Request): Promise<{ token: string; user: UserClaims } | null> => {
    const token = parseCookie(req.header('cookie') ?? '')[COOKIE];
    if (!token) return null;
    try {
      return { token, user: await verifyBearerToken(token, cfg.verifier) };
    } catch (err) {
      if (err instanceof InvalidTokenError) return null;
      throw err;
    }
  };
  const setSession = (res: Response, token: string | null) =>
    res.setHeader(
      'set-cookie',
      stringifySetCookie({
        name: COOKIE,
        value: token ?? '',
        httpOnly: true,
        secure: cfg.secureCookie,
        sameSite: 'strict',
        path: '/inbox',
        maxAge: token ? 3600 : 0,
      }),
    );

  router.get('/inbox', async (req, res) => {
    secure(res);
    if (await session(req)) {
      res.redirect(303, '/inbox/approvals');
      return;
    }
    const users = cfg.localSecret ? loadWorld().users.map((u) => ({ id: u.id, role: u.role, region: u.region })) : null;
    res.type('html').send(signInPage(users));
  });

  router.post('/inbox/session', form, async (req, res) => {
    secure(res);
    const body = z.object({ userId: z.string().optional(), token: z.string().optional() }).safeParse(req.body);
    const refusal = cfg.signInLimiter ? await cfg.signInLimiter.take(claimedSubject(body.success ? body.data : {})) : null;
    if (refusal) return sendRateRefusal(res, refusal, cfg.signInLimiter!.settings);
    let token: string | undefined;
    if (body.success && body.data.userId && cfg.localSecret) {
      const u = loadWorld().users.find((x) => x.id === body.data.userId);
      if (u) token = await signUserToken({ sub: u.id, tenant: u.tenant, roles: [u.role] }, cfg.localSecret);
    } else if (body.success && body.data.token) token = body.data.token;
    try {
      if (!token) throw new InvalidTokenError('no user chosen');
      await verifyBearerToken(token, cfg.verifier);
    } catch {
      res
        .status(401)
        .type('html')
        .send(signInPage(cfg.localSecret ? loadWorld().users : null, 'Sign-in failed: unknown user or invalid token.'));
      return;
    }
    setSession(res, token);
    res.redirect(303, '/inbox/approvals');
  });

  router.get('/inbox/signout', (_req, res) => {
    setSession(res, null);
    res.redirect(303, '/inbox');
  });

  router.get('/inbox/approvals', async (req, res) => {
    secure(res);
    const s = await session(req);
    if (!s) {
      res.redirect(303, '/inbox');
      return;
    }
    const rows = await selectApprovals(cfg.db, s.user.tenant).where('p.status', '=', 'pending').orderBy('p.created_at').execute();
    const flash = typeof req.query.done === 'string' ? req.query.done.slice(0, 200) : undefined;
    res.type('html').send(
      inboxPage(
        s.user.sub,
        rows.map((r) => toView(r, s.user.sub)),
        csrfOf(s.token),
        flash,
      ),
    );
  });

  router.post('/inbox/approvals/:id/decision', form, async (req, res) => {
    secure(res);
    const s = await session(req);
    if (!s) {
      res.status(401).type('html').send(page('Signed out', '<p>Your session ended. <a href="/inbox">Sign in again</a>.</p>'));
      return;
    }
    const parsed = FormDecision.safeParse(req.body);
    const expected = Buffer.from(csrfOf(s.token));
    const given = Buffer.from(parsed.success ? parsed.data.csrf : '');
    if (!parsed.success || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      res.status(403).type('html').send(page('Refused', '<p>The form was not issued by this inbox (CSRF check failed).</p>'));
      return;
    }
    const { csrf: _csrf, ...decision } = parsed.data;
    try {
      const outcome = await decideApproval(cfg.db, s.user, String(req.params.id), decision, cfg.auditHmacKey);
      await cfg.relay.publish(outcome.rows);
      res.redirect(303, `/inbox/approvals?done=${encodeURIComponent(`Version ${decision.actionVersion} ${outcome.status}.`)}`);
    } catch (err) {
      if (!(err instanceof GatehouseError)) throw err;
      res
        .status(httpStatusOf(err))
        .type('html')
        .send(
          page(
            'Not recorded',
            `<p>The decision was not recorded: ${escapeHtml(err.reason)}.</p><p><a href="/inbox/approvals">Back to the inbox</a></p>`,
          ),
        );
    }
  });
  return router;
}
