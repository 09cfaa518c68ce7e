import { createHmac, timingSafeEqual } from 'node:crypto';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { parseCookie, stringifySetCookie } from 'cookie';
import { z } from 'zod';
import { loadWorld } from '@gatehouse/contracts';
import { InvalidTokenError, signUserToken, type VerifiedUserClaims } from '@gatehouse/credentials';
import { claimedSubject, sendRateRefusal, type AbuseLimiter } from '../rate-limit.ts';
import { verifyBearerToken, type BearerVerifier } from '../user-token.ts';
import type { ChooserUser } from './page.ts';

/** Lifetime of a browser session cookie, seconds (the local chooser's tokens live as long). */
export const SESSION_MAX_AGE_SECONDS = 3600;

/** Settings of one surface's browser sessions (the approval inbox, the ops dashboard). */
export interface BrowserSessionConfig {
  /** Name of the session cookie (`gh_inbox`, `gh_ops`). */
  cookie: string;
  /** Path the cookie is sent for (`/inbox`, `/`). */
  path: string;
  /** Verifies the bearer token the cookie holds (HS256 locally, the JWKS in production); give it the revocation check ({@link withRevocations}). */
  verifier: BearerVerifier;
  /** Key of the CSRF tokens (an HMAC of the session token): the service's audit HMAC key. */
  csrfKey: string;
  /** Local HS256 secret that signs the chooser's sessions; null in production (a token is pasted). */
  localSecret: string | null;
  /**
   * Marks the cookie `Secure` (sent over HTTPS only): true in production (`GATEHOUSE_ENV=production`,
   * docs/decisions/0180-strict-production-mode.md); false keeps local http working.
   */
  secureCookie: boolean;
  /** Per-user and per-tenant limits of sign-in attempts (the processes always pass one). */
  signInLimiter?: AbuseLimiter;
}

/** A signed-in browser: the bearer token of its cookie and the verified claims. */
export interface BrowserSessionState {
  token: string;
  user: VerifiedUserClaims;
}

/** The outcome of a sign-in form: signed in (the caller sets the cookie when it admits the user), refused (render the form again, 401), or already answered (429). */
export type SignInOutcome = { kind: 'signed_in'; token: string; user: VerifiedUserClaims } | { kind: 'refused' } | { kind: 'answered' };

/** One surface's browser sessions; see {@link browserSession}. */
export interface BrowserSession {
  /** `application/x-www-form-urlencoded` parser of the surface's forms (16 KiB). */
  form: RequestHandler;
  /** The users the local chooser offers (world.json), or null when a token must be pasted. */
  chooserUsers(): ChooserUser[] | null;
  /** The session of a request's cookie, or null (no cookie, or a token that no longer verifies). */
  read(req: Request): Promise<BrowserSessionState | null>;
  /** Sets the session cookie to `token`, or clears it (`null`). */
  set(res: Response, token: string | null): void;
  /** The CSRF token of a session token: what every form of that session carries. */
  csrfOf(token: string): string;
  /** True only when `given` is the CSRF token of `token` (constant-time comparison). */
  csrfValid(token: string, given: unknown): boolean;
  /** Handles a sign-in form post: counts the attempt, then the chooser's user or the pasted token. */
  signIn(req: Request, res: Response): Promise<SignInOutcome>;
}

const SignInForm = z.object({ userId: z.string().max(100).optional(), token: z.string().max(8192).optional() });

/**
 * The browser session of a server-rendered surface (docs/decisions/0290-one-error-tree-and-browser-session.md):
 * the bearer token lives in an `HttpOnly`, `SameSite=Strict` cookie (one hour; `Secure` in
 * production), every state-changing form carries a CSRF token (HMAC-SHA256 of the session token
 * under `csrfKey`), and sign-in takes the local chooser's user (local mode) or a pasted token,
 * each attempt counted by the sign-in limiter (429 past it).
 */
export function browserSession(cfg: BrowserSessionConfig): BrowserSession {
  const csrfOf = (token: string) => createHmac('sha256', cfg.csrfKey).update(`csrf:${token}`).digest('hex');
  const chooserUsers = () => (cfg.localSecret ? loadWorld().users.map((u) => ({ id: u.id, role: u.role, region: u.region })) : null);
  const set = (res: Response, token: string | null) =>
    res.setHeader(
      'set-cookie',
      stringifySetCookie({
        name: cfg.cookie,
        value: token ?? '',
        httpOnly: true,
        secure: cfg.secureCookie,
        sameSite: 'strict',
        path: cfg.path,
        maxAge: token ? SESSION_MAX_AGE_SECONDS : 0,
      }),
    );
  return {
    form: express.urlencoded({ extended: false, limit: '16kb' }),
    chooserUsers,
    set,
    csrfOf,
    csrfValid(token, given) {
      const expected = Buffer.from(csrfOf(token));
      const got = Buffer.from(typeof given === 'string' ? given : '');
      return got.length === expected.length && timingSafeEqual(got, expected);
    },
    async read(req) {
      const token = parseCookie(req.header('cookie') ?? '')[cfg.cookie];
      if (!token) return null;
      try {
        return { token, user: await verifyBearerToken(token, cfg.verifier) };
      } catch (err) {
        if (err instanceof InvalidTokenError) return null;
        throw err;
      }
    },
    async signIn(req, res) {
      const body = SignInForm.safeParse(req.body);
      const refusal = cfg.signInLimiter ? await cfg.signInLimiter.take(claimedSubject(body.success ? body.data : {})) : null;
      if (refusal) {
        sendRateRefusal(res, refusal, cfg.signInLimiter!.settings);
        return { kind: 'answered' };
      }
      let token: string | undefined;
      if (body.success && body.data.userId && cfg.localSecret) {
        const u = loadWorld().users.find((x) => x.id === body.data.userId);
        if (u) token = await signUserToken({ sub: u.id, tenant: u.tenant, roles: [u.role] }, cfg.localSecret);
      } else if (body.success && body.data.token) token = body.data.token.trim();
      if (!token) return { kind: 'refused' };
      try {
        const user = await verifyBearerToken(token, cfg.verifier);
        return { kind: 'signed_in', token, user };
      } catch (err) {
        if (err instanceof InvalidTokenError) return { kind: 'refused' };
        throw err;
      }
    },
  };
}
