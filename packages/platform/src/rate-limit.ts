import type { NextFunction, Request, Response } from 'express';
import type { Redis } from 'ioredis';
import { decodeJwt } from 'jose';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { loadWorld, testFaults } from '@gatehouse/contracts';
import type { BaseEnv } from './env.ts';

/** Who a request counts against: the user and the tenant (null: not counted). */
export interface RateSubject {
  user: string;
  tenant: string;
}

/** Limits of one surface (intake, sign-in): requests per user and per tenant within a window. */
export interface RateLimitSettings {
  /** Names the counters (`<prefix>:rl:<surface>:user:…`), e.g. `intake`, `signin`. */
  surface: string;
  perUser: number;
  perTenant: number;
  windowSeconds: number;
}

/** A refusal: which limit was hit and when to retry, whole seconds (the `Retry-After` value, RFC 9110 §10.2.3). */
export interface RateRefusal {
  scope: 'user' | 'tenant';
  limit: number;
  retryAfterSeconds: number;
}

/**
 * Test-only switch `GATEHOUSE_TEST_DISABLE_RATE_LIMITS=1`: nothing is counted (control-removed test).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function limitsDisabled(): boolean {
  return testFaults().disableRateLimits;
}

/** The user's counter key: the user within their tenant (ids are unique per tenant only). */
const userKey = (subject: RateSubject): string => `${subject.tenant}\u0000${subject.user}`;

/**
 * Per-user and per-tenant fixed-window counters in Redis (`rate-limiter-flexible`), shared by
 * every replica. While Redis is not ready each process counts in memory instead (the insurance
 * limiter), so an outage neither blocks intake nor lifts the limits (docs/decisions/0181-abuse-limits.md).
 */
export class AbuseLimiter {
  readonly #user: RateLimiterRedis;
  readonly #tenant: RateLimiterRedis;
  readonly #settings: RateLimitSettings;
  readonly #disabled = limitsDisabled();

  /** @param keyPrefix the deployment's key prefix (`QUEUE_PREFIX`), so tests and stacks do not share counters. */
  constructor(redis: Redis, keyPrefix: string, settings: RateLimitSettings) {
    this.#settings = settings;
    const make = (scope: string, points: number) => {
      const opts = { keyPrefix: `${keyPrefix}:rl:${settings.surface}:${scope}`, points, duration: settings.windowSeconds };
      return new RateLimiterRedis({
        ...opts,
        storeClient: redis,
        rejectIfRedisNotReady: true,
        insuranceLimiter: new RateLimiterMemory(opts),
      });
    };
    this.#user = make('user', settings.perUser);
    this.#tenant = make('tenant', settings.perTenant);
  }

  /**
   * Counts one request of `subject` (the user first, then the tenant: a user over their own
   * limit does not use up the tenant's). Resolves null when allowed.
   * @throws Error when neither Redis nor the insurance limiter can count (not a refusal).
   */
  async take(subject: RateSubject): Promise<RateRefusal | null> {
    if (this.#disabled) return null;
    const steps: [RateRefusal['scope'], RateLimiterRedis, string, number][] = [
      ['user', this.#user, userKey(subject), this.#settings.perUser],
      ['tenant', this.#tenant, subject.tenant, this.#settings.perTenant],
    ];
    for (const [scope, limiter, key, limit] of steps) {
      try {
        await limiter.consume(key);
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) throw err;
        return { scope, limit, retryAfterSeconds: Math.max(1, Math.ceil(err.msBeforeNext / 1000)) };
      }
    }
    return null;
  }

  /**
   * Gives back the points {@link take} counted for `subject` (best effort: a failure is ignored).
   * For a request the server failed (5xx): an outage must not use up limits. A refused take
   * counted too — the store counts every attempt — but only up to the limit that refused it:
   * `refusedAt` `user` gives back the user's point alone (the tenant was never counted);
   * otherwise the user's and the tenant's.
   */
  async giveBack(subject: RateSubject, refusedAt?: RateRefusal['scope']): Promise<void> {
    if (this.#disabled) return;
    const user = this.#user.reward(userKey(subject), 1);
    const tenant = refusedAt === 'user' ? null : this.#tenant.reward(subject.tenant, 1);
    await Promise.all([user, tenant]).catch(() => undefined);
  }

  /** Settings in force (for messages and documentation). */
  get settings(): RateLimitSettings {
    return this.#settings;
  }
}

/**
 * Answers 429 Too Many Requests: `Retry-After` in seconds and the error body `{ error: { reason,
 * message } }` every API answers with (RFC 6585 §4; the reason names the limit).
 */
export function sendTooManyRequests(res: Response, retryAfterSeconds: number, reason: string, message: string): void {
  res.setHeader('retry-after', String(retryAfterSeconds));
  res.status(429).json({ error: { reason, message } });
}

/**
 * Answers a refusal: 429 with `Retry-After` and a reason (`rate_limited_user` /
 * `rate_limited_tenant`) saying which limit and for how long.
 */
export function sendRateRefusal(res: Response, refusal: RateRefusal, settings: RateLimitSettings): void {
  sendTooManyRequests(
    res,
    refusal.retryAfterSeconds,
    `rate_limited_${refusal.scope}`,
    `more than ${refusal.limit} ${settings.surface} requests per ${refusal.scope} in ${settings.windowSeconds} s; retry after ${refusal.retryAfterSeconds} s`,
  );
}

/**
 * Express middleware counting each request against `subjectOf(req)` (skipped when it returns
 * null) and answering 429 past a limit. A request answered 5xx gives its point back.
 */
export function rateLimit(limiter: AbuseLimiter, subjectOf: (req: Request) => RateSubject | null) {
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    const subject = subjectOf(req);
    if (!subject) return next();
    try {
      // A request the server failed (a dependency down or hanging) does not count.
      let counted = false;
      res.on('finish', () => void (counted && res.statusCode >= 500 && limiter.giveBack(subject)));
      const refusal = await limiter.take(subject);
      // Answered meanwhile (the response deadline passed while the counter's store hung): the
      // caller was told to retry, so the request must not run late behind its back, and what the
      // late take counted — even a refusal, which the store counts too — is given back.
      if (res.headersSent) return void limiter.giveBack(subject, refusal?.scope);
      if (refusal) return sendRateRefusal(res, refusal, limiter.settings);
      counted = true;
      next();
    } catch (err) {
      next(err);
    }
  };
}

/**
 * Who a sign-in attempt claims to be, before anything is verified: the chosen user (tenant from
 * the directory) or the pasted token's unverified `sub` and `tenant`. Unreadable claims count
 * against `unknown`, so garbage cannot escape the limits.
 */
export function claimedSubject(form: { userId?: string; token?: string }): RateSubject {
  const text = (v: unknown): string => (typeof v === 'string' && v ? v.slice(0, 256) : 'unknown');
  if (form.userId) {
    const u = loadWorld().users.find((x) => x.id === form.userId);
    return { user: text(form.userId), tenant: text(u?.tenant) };
  }
  try {
    const claims = decodeJwt(form.token ?? '');
    return { user: text(claims.sub), tenant: text(claims.tenant) };
  } catch {
    return { user: 'unknown', tenant: 'unknown' };
  }
}

/** The limiter of a surface from the base settings (`INTAKE_RATE_*` or `SIGNIN_RATE_*`, `RATE_LIMIT_WINDOW_SECONDS`). */
export function limiterFromEnv(redis: Redis, env: BaseEnv, surface: 'intake' | 'signin'): AbuseLimiter {
  return new AbuseLimiter(redis, env.QUEUE_PREFIX, {
    surface,
    perUser: surface === 'intake' ? env.INTAKE_RATE_PER_USER : env.SIGNIN_RATE_PER_USER,
    perTenant: surface === 'intake' ? env.INTAKE_RATE_PER_TENANT : env.SIGNIN_RATE_PER_TENANT,
    windowSeconds: env.RATE_LIMIT_WINDOW_SECONDS,
  });
}
