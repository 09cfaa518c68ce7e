import { TokenRevokedError, type VerifiedUserClaims } from '@gatehouse/credentials';
import { DependencyUnavailable, loadUserTokenRevocations, revokedBecause, type Db, type RevokedBecause } from '@gatehouse/ledger';
import { within } from './timeout.ts';

/** Default of `GATEHOUSE_AUTH_REVOCATION_CACHE_MS`: a revocation is seen by every service within this many ms. */
export const DEFAULT_REVOCATION_CACHE_MS = 1000;

/** Longest wait for one load of the revocations, ms: a ledger that hangs fails the check (503) instead of holding it, and the next check loads again. */
export const REVOCATION_LOAD_TIMEOUT_MS = 2000;

/** The revocation check of a verifier: throws when a verified token was revoked. */
export interface TokenRevocationCheck {
  /**
   * @throws TokenRevokedError (401 `token_revoked`) when `claims`' token is revoked.
   * @throws DependencyUnavailable (503) when the revocations cannot be read and the cache is older than its bound (fail closed).
   */
  assertNotRevoked(claims: VerifiedUserClaims): Promise<void>;
}

/** The 401 of a revoked token, naming which revocation refused it. */
export function tokenRevokedError(because: RevokedBecause): TokenRevokedError {
  return new TokenRevokedError(
    because === 'jti'
      ? 'token revoked: an operator revoked this token (its jti)'
      : "token revoked: an operator revoked this user's tokens issued before a time after this one's; sign in again for a new token",
  );
}

interface Snapshot {
  notBeforeS: Map<string, number>;
  jtis: Set<string>;
  loadedAtMs: number;
}

/**
 * A per-process cache of every user token revocation of one ledger (docs/decisions/0695-user-tokens-can-be-revoked.md).
 * A check answers from the snapshot while it is younger than `ttlMs`; else it reloads first (one
 * load at a time, shared by the checks waiting for it). So a revocation committed at `t` refuses
 * every token of it from `t + ttlMs` (plus one load) on. Fails closed: when the reload fails the
 * check throws DependencyUnavailable (503) — it never answers from a snapshot older than the bound.
 */
export class TokenRevocationCache implements TokenRevocationCheck {
  private snapshot: Snapshot | null = null;
  private loading: Promise<Snapshot> | null = null;
  private readonly db: Db;
  private readonly ttlMs: number;
  private readonly nowMs: () => number;

  /**
   * @param ttlMs the staleness bound, ms (0: read the ledger on every check).
   * @param nowMs the clock (epoch ms); tests pass their own.
   */
  constructor(db: Db, ttlMs: number, nowMs: () => number = Date.now) {
    this.db = db;
    this.ttlMs = ttlMs;
    this.nowMs = nowMs;
  }

  async assertNotRevoked(claims: VerifiedUserClaims): Promise<void> {
    const s = await this.current();
    const notBefore = s.notBeforeS.get(claims.sub);
    const because = revokedBecause(claims, {
      notBeforeS: notBefore ?? null,
      jtiRevoked: claims.jti !== undefined && s.jtis.has(claims.jti),
    });
    if (because) throw tokenRevokedError(because);
  }

  /** The snapshot, reloaded first when it is `ttlMs` old or older. */
  private async current(): Promise<Snapshot> {
    const s = this.snapshot;
    if (s && this.nowMs() - s.loadedAtMs < this.ttlMs) return s;
    this.loading ??= this.load().finally(() => {
      this.loading = null;
    });
    return this.loading;
  }

  private async load(): Promise<Snapshot> {
    // Stamped before the read: the snapshot holds every revocation committed by then.
    const loadedAtMs = this.nowMs();
    const r = await within(loadUserTokenRevocations(this.db), REVOCATION_LOAD_TIMEOUT_MS).catch((err: unknown) => {
      if (err instanceof DependencyUnavailable) throw err;
      throw new DependencyUnavailable('postgres', `user token revocations cannot be read: ${(err as Error).message}`, { cause: err });
    });
    this.snapshot = { ...r, loadedAtMs };
    return this.snapshot;
  }
}

const caches = new WeakMap<Db, Map<number, TokenRevocationCache>>();

/**
 * The process's revocation cache of `db` with the staleness bound `ttlMs` (one per ledger and
 * bound, shared by every app and session of the process).
 */
export function revocationCacheOf(db: Db, ttlMs: number): TokenRevocationCache {
  let byTtl = caches.get(db);
  if (!byTtl) caches.set(db, (byTtl = new Map()));
  let cache = byTtl.get(ttlMs);
  if (!cache) byTtl.set(ttlMs, (cache = new TokenRevocationCache(db, ttlMs)));
  return cache;
}
