import { Router, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import { storableString } from '@gatehouse/contracts';
import {
  browserSession,
  escapeHtml,
  GatehouseError,
  httpStatusOf,
  setPageHeaders,
  type AbuseLimiter,
  type BearerVerifier,
  type OutboxRelay,
} from '@gatehouse/platform';
import type { Db } from '@gatehouse/ledger';
import { decideApproval } from '../domain/decide.ts';
import { approvalsAfter, decodeCursor, encodeCursor, isApprovalOfTenant, toView } from '../domain/approval-view.ts';
import { inboxPage, page, signInPage } from './inbox.html.ts';

/** Pending approvals one inbox page shows, oldest first; the page links to the next (ADR 0723). */
export const INBOX_PAGE_SIZE = 50;

/**
 * One inbox page of `tenant`'s pending approvals: at most {@link INBOX_PAGE_SIZE}, oldest first,
 * after the approval the `after` cursor names (the first page when it is absent, not a cursor
 * {@link encodeCursor} made, or names no approval of `tenant` — {@link cursorOfTenant}), and the
 * cursor of the next page (null on the last). Every pending approval is shown, decidable or not
 * (a card says why not), so a page's size bounds the query.
 */
async function inboxApprovals(db: Db, tenant: string, after: unknown) {
  const from = await cursorOfTenant(db, tenant, after);
  const rows = await approvalsAfter(db, tenant, 'pending', from)
    .limit(INBOX_PAGE_SIZE + 1)
    .execute();
  const more = rows.length > INBOX_PAGE_SIZE;
  const page = rows.slice(0, INBOX_PAGE_SIZE);
  return { rows: page, next: more ? encodeCursor(page.at(-1)!.id) : null };
}

/**
 * The approval id an inbox `after` cursor resumes after, when it names an approval of `tenant`;
 * null otherwise (no cursor, one {@link encodeCursor} did not make, or another tenant's approval,
 * {@link isApprovalOfTenant}): the inbox shows its first page for another tenant's (ADR 0758).
 */
async function cursorOfTenant(db: Db, tenant: string, after: unknown): Promise<string | null> {
  const id = typeof after === 'string' ? (decodeCursor(after) ?? null) : null;
  return id && (await isApprovalOfTenant(db, id, tenant)) ? id : null;
}

/** Name of the inbox's session cookie (path `/inbox`). */
export const INBOX_COOKIE = 'gh_inbox';
const FormDecision = z.object({
  csrf: z.string(),
  decision: z.enum(['approve', 'deny']),
  actionVersion: z.coerce.number().int().positive(),
  actionDigest: z.string().regex(/^[0-9a-f]{64}$/),
  reason: storableString().max(500).optional(),
});

/**
 * The inbox's confirmation of a decision it just recorded (`?done=approved|denied&version=<n>`,
 * the address its decision form redirects to), in its own words: `Version <n> <status>.`;
 * undefined for anything else. Nothing of the address is shown as text: a link to the inbox can
 * be planted by anyone (a ticket, a model's reply), and the page shows trusted text only
 * (docs/product/public-contract.md#approvals).
 */
function confirmation(query: Record<string, unknown>): string | undefined {
  const { done, version } = query;
  if (done !== 'approved' && done !== 'denied') return undefined;
  if (typeof version !== 'string' || !/^[1-9][0-9]{0,8}$/.test(version)) return undefined;
  return `Version ${Number(version)} ${done}.`;
}

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
 * The approver inbox (docs/product/public-contract.md#approvals): server-rendered pages, no script,
 * on the platform's browser session (`browserSession`: the bearer token in an HttpOnly,
 * SameSite=Strict cookie, `Secure` in production, path `/inbox`); every form carries the
 * session's CSRF token plus the action version and digest it was rendered with; every value is
 * HTML-escaped, so model-written text (e.g. a refund reason) is shown as text, never markup.
 */
export function inboxRouter(cfg: InboxConfig): Router {
  const router = Router();
  const session = browserSession({
    cookie: INBOX_COOKIE,
    path: '/inbox',
    verifier: cfg.verifier,
    csrfKey: cfg.auditHmacKey,
    localSecret: cfg.localSecret,
    secureCookie: cfg.secureCookie,
    signInLimiter: cfg.signInLimiter,
  });

  router.get('/inbox', async (req, res) => {
    setPageHeaders(res);
    if (await session.read(req)) {
      res.redirect(303, '/inbox/approvals');
      return;
    }
    res.type('html').send(signInPage(session.chooserUsers()));
  });

  router.post('/inbox/session', session.form, async (req, res) => {
    setPageHeaders(res);
    const outcome = await session.signIn(req, res);
    if (outcome.kind === 'answered') return;
    if (outcome.kind === 'refused') {
      res.status(401).type('html').send(signInPage(session.chooserUsers(), 'Sign-in failed: unknown user or invalid token.'));
      return;
    }
    session.set(res, outcome.token);
    res.redirect(303, '/inbox/approvals');
  });

  router.get('/inbox/signout', (_req, res) => {
    setPageHeaders(res);
    session.set(res, null);
    res.redirect(303, '/inbox');
  });

  router.get('/inbox/approvals', async (req, res) => {
    setPageHeaders(res);
    const s = await session.read(req);
    if (!s) {
      res.redirect(303, '/inbox');
      return;
    }
    const shown = await inboxApprovals(cfg.db, s.user.tenant, req.query.after);
    const flash = confirmation(req.query);
    res.type('html').send(
      inboxPage(
        s.user.sub,
        shown.rows.map((r) => toView(r, s.user.sub)),
        session.csrfOf(s.token),
        flash,
        shown.next,
      ),
    );
  });

  router.post('/inbox/approvals/:id/decision', session.form, decisionHandler(cfg, session));
  return router;
}

type InboxSession = ReturnType<typeof browserSession>;

/** Answers a decision form that was not recorded: `status` with a page saying why (`whyHtml` is markup: the caller escapes what it did not write). */
function notRecorded(res: Response, status: number, whyHtml: string): void {
  res
    .status(status)
    .type('html')
    .send(page('Not recorded', `<p>The decision was not recorded: ${whyHtml}.</p><p><a href="/inbox/approvals">Back to the inbox</a></p>`));
}

/**
 * `POST /inbox/approvals/:id/decision`: the session (401 page when it ended), the form's CSRF
 * token (403 when this inbox did not issue it), the form's fields (400 naming which cannot be
 * taken), then {@link decideApproval}; a refusal of the error tree is shown with its reason and
 * status, and the decision is not recorded. Recorded → 303 to the inbox with a confirmation.
 */
function decisionHandler(cfg: InboxConfig, session: InboxSession): RequestHandler {
  return async (req, res) => {
    setPageHeaders(res);
    const s = await session.read(req);
    if (!s) {
      res.status(401).type('html').send(page('Signed out', '<p>Your session ended. <a href="/inbox">Sign in again</a>.</p>'));
      return;
    }
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (typeof body.csrf !== 'string' || !session.csrfValid(s.token, body.csrf)) {
      res.status(403).type('html').send(page('Refused', '<p>The form was not issued by this inbox (CSRF check failed).</p>'));
      return;
    }
    // The inbox's own form, with a field it cannot take (a reason too long, a character that cannot be stored):
    // say which, rather than call the form forged.
    const parsed = FormDecision.safeParse(body);
    if (!parsed.success) {
      const fields = [...new Set(parsed.error.issues.map((i) => String(i.path[0] ?? 'form')))].join(', ');
      notRecorded(
        res,
        400,
        `the form's ${escapeHtml(fields)} cannot be taken (a reason is at most 500 characters, with no NUL or unpaired surrogate)`,
      );
      return;
    }
    const { csrf: _csrf, ...decision } = parsed.data;
    try {
      const outcome = await decideApproval(cfg.db, s.user, String(req.params.id), decision, cfg.auditHmacKey);
      await cfg.relay.publish(outcome.rows);
      res.redirect(303, `/inbox/approvals?done=${outcome.status}&version=${decision.actionVersion}`);
    } catch (err) {
      if (!(err instanceof GatehouseError)) throw err;
      notRecorded(res, httpStatusOf(err), escapeHtml(err.reason));
    }
  };
}
