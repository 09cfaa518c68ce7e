import { Router, type NextFunction, type Request, type Response } from 'express';
import { parseCookie } from 'cookie';
import { InvalidTokenError, type UserClaims } from '@gatehouse/credentials';
import { actorHash, inTransaction, recordAudit, type Db } from '@gatehouse/ledger';
import {
  bearerTokenOf,
  browserSession,
  Forbidden,
  isDirectoryOperator,
  sendRateRefusal,
  setPageHeaders,
  Unauthorized,
  verifyBearerToken,
  withRevocations,
  type AbuseLimiter,
  type BearerVerifier,
  type RateRefusal,
  type Logger,
} from '@gatehouse/platform';
import { refusedPage, signInPage } from './pages.html.ts';

/** Name of the session cookie holding an operator's bearer token. */
export const OPS_COOKIE = 'gh_ops';

/** Settings of the dashboard's sign-in and operator check. */
export interface OperatorAuthConfig {
  db: Db;
  log: Logger;
  verifier: BearerVerifier;
  auditHmacKey: string;
  /** Local HS256 secret used to sign chooser sessions; null in production (tokens are pasted). */
  localSecret: string | null;
  /** Marks the cookie `Secure` (production, behind TLS). */
  secureCookie: boolean;
  /**
   * Per-user and per-tenant limits of sign-in attempts and of refused non-operators' requests
   * (the process always passes one; ADR 0725).
   */
  signInLimiter?: AbuseLimiter;
}

/** The verified operator of a request, set by {@link operatorAuth}'s `requireOperator`. */
export function operatorOf(res: Response): UserClaims {
  return res.locals.operator as UserClaims;
}

/** Headers of every page the dashboard renders itself: the shared page headers (no script, no framing, no referrer). */
export const securePage = setPageHeaders;

/**
 * API callers (and bull-board's own API: `/api/…`, `/queues/api/…`) get JSON errors; every other
 * path is a page and browsers get pages — the one rule of the dashboard's error answers (sign-in
 * refusals here, outages in app.ts). The path is read as the router matches it: case-insensitive,
 * and the path of an absolute-form target (`GET http://host/api/overview`), so a refusal of a
 * request the API would answer is JSON too.
 */
export function wantsJson(req: Request): boolean {
  return /^\/(queues\/)?api(\/|$)/i.test(requestPath(req.originalUrl));
}

/** The path of a request target: origin-form (`/api/x?q`) or absolute-form (`http://h/api/x`), without its query. */
function requestPath(target: string): string {
  try {
    return new URL(target, 'http://request.invalid').pathname;
  } catch {
    return target;
  }
}

/**
 * Sign-in and the operator check of the ops dashboard. A request carries an operator's bearer
 * JWT either in `Authorization: Bearer …` (tools) or in the `gh_ops` cookie set by sign-in
 * (browsers; the platform's `browserSession`: HttpOnly, SameSite=Strict, `Secure` in production, path `/`, one hour). Only a user the directory lists with role `operator` enters: no or
 * an invalid token is 401, any other role 403 — a refusal of a known caller is audited
 * (`ops.refused`, outcome `dashboard:not_an_operator`, the caller's id hashed) within the sign-in
 * limits; past them the caller gets 429 with `Retry-After` and nothing is audited (ADR 0725). Local mode offers
 * a user chooser (like the approval inbox); production takes a pasted token.
 */
export function operatorAuth(cfg: OperatorAuthConfig): {
  router: Router;
  requireOperator: (req: Request, res: Response, next: NextFunction) => Promise<void>;
} {
  const router = Router();
  // A revoked operator token is refused by the dashboard, its API and its sessions (ADR 0695).
  const verifier = withRevocations(cfg.verifier, cfg.db);
  const session = browserSession({
    cookie: OPS_COOKIE,
    path: '/',
    verifier,
    csrfKey: cfg.auditHmacKey,
    localSecret: cfg.localSecret,
    secureCookie: cfg.secureCookie,
    signInLimiter: cfg.signInLimiter,
  });
  const users = () => session.chooserUsers()?.map((u) => ({ id: u.id, role: u.role })) ?? null;
  const requireOperator = operatorCheck(cfg, verifier, users);

  router.get('/', (_req, res) => res.redirect(303, '/ops'));

  router.get('/signin', (_req, res) => {
    securePage(res);
    res.type('html').send(signInPage(users()));
  });

  router.post('/session', session.form, async (req, res) => {
    securePage(res);
    const outcome = await session.signIn(req, res);
    if (outcome.kind === 'answered') return;
    if (outcome.kind === 'refused') {
      res.status(401).type('html').send(signInPage(users(), 'Sign-in failed: unknown user or invalid token.'));
      return;
    }
    if (!isDirectoryOperator(outcome.user)) {
      await auditRefusal(cfg, outcome.user, '/session');
      res.status(403).type('html').send(refusedPage(outcome.user.sub));
      return;
    }
    session.set(res, outcome.token);
    res.redirect(303, '/ops');
  });

  router.get('/signout', (_req, res) => {
    securePage(res);
    session.set(res, null);
    res.redirect(303, '/signin');
  });

  return { router, requireOperator };
}

/** The sign-in chooser's users (local mode), null when sign-in takes a pasted token. */
type ChooserUsers = () => Array<{ id: string; role: string }> | null;

/**
 * The warn line of a known caller the dashboard refused, written for every refusal — `audited`
 * false for one past the sign-in limits, answered 429 and not audited (ADR 0725); `where` is the path.
 */
function logRefusal(cfg: OperatorAuthConfig, user: UserClaims, where: string, audited: boolean): void {
  cfg.log.warn({ user: user.sub, where, audited }, 'ops dashboard refused a non-operator');
}

/**
 * Logs and audits a known caller the dashboard refused (`ops.refused`, outcome
 * `dashboard:not_an_operator`, the caller's id hashed with the audit key); `where` is the path.
 * @throws what the ledger throws when the audit event cannot be written.
 */
async function auditRefusal(cfg: OperatorAuthConfig, user: UserClaims, where: string): Promise<void> {
  logRefusal(cfg, user, where, true);
  await inTransaction(cfg.db, (trx) =>
    recordAudit(trx, {
      type: 'ops.refused',
      service: 'ops',
      runId: null,
      actorHash: actorHash(cfg.auditHmacKey, user.sub),
      outcome: 'dashboard:not_an_operator',
    }),
  );
}

/**
 * Whether a refused caller is past the sign-in limits (per user and per tenant, shared by the
 * replicas through Redis): each refusal writes an audit event, so without a bound any valid
 * token could write the audit chain at the rate it sends requests (docs/decisions/0725-refusals-of-the-ops-dashboard-are-rate-limited.md).
 * Resolves null when the refusal may be answered and audited (or no limiter is configured).
 */
function refusalLimited(cfg: OperatorAuthConfig, user: UserClaims): Promise<RateRefusal | null> {
  return cfg.signInLimiter ? cfg.signInLimiter.take({ user: user.sub, tenant: user.tenant }) : Promise.resolve(null);
}

/**
 * The token of a request: the bearer header wins over the cookie.
 * @throws Unauthorized(`malformed_authorization`) when the header is there but malformed ({@link bearerTokenOf}).
 */
function tokenOf(req: Request): string | undefined {
  const header = req.header('authorization');
  if (header !== undefined) return bearerTokenOf(header) ?? '';
  return parseCookie(req.header('cookie') ?? '')[OPS_COOKIE] || undefined;
}

/**
 * Who sent a request: the verified user of its token, or null with the reason and message of the
 * 401 (`missing_token`, `invalid_token`, the malformed header's reason (ADR 0747) or `token_revoked`
 * (ADR 0695)).
 * @throws any error but a malformed header's Unauthorized or an invalid token's InvalidTokenError
 *   (the verifier's outage, say).
 */
async function callerOf(req: Request, verifier: BearerVerifier): Promise<{ user: UserClaims | null; reason: string; message: string }> {
  let token: string | undefined;
  let reason = 'missing_token';
  let message = 'an operator bearer token is required';
  try {
    token = tokenOf(req);
    if (token) reason = 'invalid_token';
  } catch (err) {
    if (!(err instanceof Unauthorized)) throw err;
    ({ reason, message } = err); // 401 naming what is wrong with the header (ADR 0747)
  }
  if (token) {
    try {
      return { user: await verifyBearerToken(token, verifier), reason, message };
    } catch (err) {
      if (!(err instanceof InvalidTokenError)) throw err;
      if (err.reason === 'token_revoked') ({ reason, message } = err); // 401 naming the revocation (ADR 0695)
    }
  }
  return { user: null, reason, message };
}

/**
 * The middleware letting only the directory's operators through (`res.locals.operator` set): no
 * or an invalid token is 401 (JSON for API callers, the sign-in page for browsers), a known
 * non-operator 403 and audited, or 429 past the sign-in limits and not audited (ADR 0725).
 * Errors it did not answer (an outage) go to `next`.
 */
function operatorCheck(
  cfg: OperatorAuthConfig,
  verifier: BearerVerifier,
  users: ChooserUsers,
): (req: Request, res: Response, next: NextFunction) => Promise<void> {
  return async (req, res, next) => {
    let caller: Awaited<ReturnType<typeof callerOf>>;
    try {
      caller = await callerOf(req, verifier);
    } catch (err) {
      return next(err);
    }
    const { user, reason, message } = caller;
    if (!user) {
      if (wantsJson(req)) {
        next(new Unauthorized(reason, message));
      } else {
        securePage(res);
        res
          .status(401)
          .type('html')
          .send(signInPage(users(), reason !== 'missing_token' ? 'Your session is no longer valid; sign in again.' : undefined));
      }
      return;
    }
    if (!isDirectoryOperator(user)) {
      // A known caller's refusals count against the sign-in limits: past them 429, not audited (ADR 0725).
      const limited = await refusalLimited(cfg, user).catch((err: unknown) => err as Error);
      if (limited instanceof Error) return next(limited);
      const where = req.originalUrl.slice(0, 200);
      if (limited) {
        logRefusal(cfg, user, where, false);
        return sendRateRefusal(res, limited, cfg.signInLimiter!.settings);
      }
      await auditRefusal(cfg, user, where);
      if (wantsJson(req)) next(new Forbidden('not_an_operator', 'the ops dashboard is for operators only'));
      else {
        securePage(res);
        res.status(403).type('html').send(refusedPage(user.sub));
      }
      return;
    }
    res.locals.operator = user;
    next();
  };
}
