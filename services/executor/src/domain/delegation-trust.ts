import { delegationPublicJwk, PUBLISHED_JWKS_PATH, type DelegationSigningKey } from '@gatehouse/credentials';
import { testFaults } from '@gatehouse/contracts';
import { handBack, needsOperator, type JobHold, type Logger, type QueueJob, type ReadyCheck } from '@gatehouse/platform';

/** How long `/readyz` reuses one answer of the published JWKS, ms (probes come every few seconds). */
const TRUST_CACHE_MS = 5_000;

/** How long one read of the published JWKS may take, ms (below `READY_CHECK_TIMEOUT_MS`, 2 s). */
const TRUST_READ_TIMEOUT_MS = 1_500;

/**
 * What the systems of record's published JWKS says of this executor's signing key: `trusted` (a
 * key of the same `kid` and the same public key is listed), `untrusted` (it is not; `kids` the
 * ones that are), or `unknown` (nothing usable was read: not answering, another status, not a
 * JWKS — `why` says which).
 */
type TrustAnswer = { state: 'trusted' } | { state: 'untrusted'; kids: string[] } | { state: 'unknown'; why: string };

/**
 * Reads `GET <stagingUrl>/.well-known/jwks.json` once and compares it with `own` (the signing
 * key's public JWK: `kid`, `x`). Never rejects.
 */
async function readTrust(stagingUrl: string, own: { kid: string; x: string }): Promise<TrustAnswer> {
  try {
    const res = await fetch(new URL(PUBLISHED_JWKS_PATH, stagingUrl), { signal: AbortSignal.timeout(TRUST_READ_TIMEOUT_MS) });
    if (!res.ok) return { state: 'unknown', why: `answered ${res.status}` };
    const doc = (await res.json()) as { keys?: Array<{ kid?: unknown; x?: unknown }> };
    if (!Array.isArray(doc.keys)) return { state: 'unknown', why: 'not a JWKS' };
    if (doc.keys.some((k) => k.kid === own.kid && k.x === own.x)) return { state: 'trusted' };
    return { state: 'untrusted', kids: doc.keys.map((k) => String(k.kid)) };
  } catch (err) {
    return { state: 'unknown', why: (err as Error).message };
  }
}

/** The reason of the `delegationKey` check when the systems of record do not list the executor's key. */
function untrustedKeyReason(stagingUrl: string, kid: string, kids: string[]): string {
  const url = new URL(PUBLISHED_JWKS_PATH, stagingUrl).href;
  return (
    `the systems of record do not trust this executor's delegation signing key: its kid ${kid} is not in the JWKS they publish ` +
    `(${url} lists ${kids.length ? kids.join(', ') : 'no key'}), so they refuse every token it signs with 401. ` +
    `Start it with the signing key they trust (GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: the first stack's delegation-ed25519.pem), ` +
    `or add its public key to their JWKS (GATEHOUSE_DELEGATION_JWKS_PATH) and restart them (docs/decisions/0170, 0761)`
  );
}

/** How far a job fetched while the key is untrusted is delayed, ms: another executor, or this one fixed, takes it then. */
const HOLD_DEFER_MS = 5_000;
/** How often held jobs are logged, at most, ms: each held job comes back every {@link HOLD_DEFER_MS}. */
const HELD_LOG_EVERY_MS = 60_000;

/**
 * What the systems of record at `stagingUrl` say of this executor's delegation signing key, read
 * from the JWKS they publish (ADR 0761) at most every {@link TRUST_CACHE_MS}, one read at a time
 * (after the first, in the background: callers get the last answer meanwhile).
 * A read that gives no answer (the systems of record down, or not publishing) keeps the last
 * answer, and counts as trusted before any: their availability is not this check's business — a
 * write meets it as a dependency fault. Each change of answer is logged, an untrusted key at error
 * level with both key ids. Two uses: {@link readyCheck} (`/readyz`'s `delegationKey`) and, as a
 * {@link JobHold}, the executions worker's hold (ADR 0767).
 */
export class DelegationTrust implements JobHold {
  readonly #stagingUrl: string;
  readonly #own: { kid: string; x: string };
  readonly #log: Logger;
  #known: Exclude<TrustAnswer, { state: 'unknown' }> | undefined;
  #readAt = 0;
  #reading: Promise<void> | undefined;
  /** Jobs held since the last log line about them, and when that line was written (epoch ms). */
  #held = { count: 0, loggedAt: 0 };
  /** The test-only switch: the worker takes jobs whatever the answer (`GATEHOUSE_TEST_DISABLE_DELEGATION_TRUST_HOLD`). */
  readonly #holdDisabled = testFaults().disableDelegationTrustHold;

  private constructor(stagingUrl: string, own: { kid: string; x: string }, log: Logger) {
    this.#stagingUrl = stagingUrl;
    this.#own = own;
    this.#log = log;
  }

  /**
   * The trust of `signing`'s key (its `kid` and public key `x`) at the systems of record at `stagingUrl`.
   * @throws Error when the test-only switch is set outside `GATEHOUSE_ENV=test`.
   */
  static async of(stagingUrl: string, signing: DelegationSigningKey, log: Logger): Promise<DelegationTrust> {
    const jwk = await delegationPublicJwk(signing.key);
    return new DelegationTrust(stagingUrl, { kid: signing.kid, x: String(jwk.x) }, log);
  }

  /**
   * The `delegationKey` readiness check, marked {@link needsOperator} (no dependency coming back
   * clears it; `stack up` stops at once and names it, ADR 0729).
   * @throws Error naming both key ids and the fix while the published JWKS does not list the key.
   */
  readonly readyCheck: ReadyCheck = needsOperator(async () => {
    const untrusted = await this.#answer();
    if (untrusted) throw new Error(untrustedKeyReason(this.#stagingUrl, this.#own.kid, untrusted.kids));
  });

  /** Whether a job fetched now goes back: the systems of record do not list the key (their last answer). */
  async holds(): Promise<boolean> {
    return !this.#holdDisabled && (await this.#answer()) !== null;
  }

  /**
   * Puts `job` back as delayed by {@link HOLD_DEFER_MS} without consuming an attempt: a token it
   * minted would be refused with 401 before any effect, and the run would end "not carried out".
   * Logged at most every {@link HELD_LOG_EVERY_MS} with the count held since the last line (the
   * first held job at once): a held job comes back every few seconds, and the key's change of
   * answer is already logged at error level.
   * @throws DelayedError always (BullMQ's protocol).
   */
  async hold(job: QueueJob, token: string | undefined): Promise<never> {
    this.#held.count++;
    if (Date.now() - this.#held.loggedAt >= HELD_LOG_EVERY_MS) {
      this.#log.warn(
        { queue: job.queueName, jobId: job.id, kid: this.#own.kid, held: this.#held.count },
        'job held: the systems of record do not trust this delegation key',
      );
      this.#held = { count: 0, loggedAt: Date.now() };
    }
    return handBack(job, token, HOLD_DEFER_MS, `held: the systems of record do not trust delegation key ${this.#own.kid}`);
  }

  /**
   * The last definite answer when it is "not listed", else null. The first call waits for the first
   * read; later, a stale answer is read again in the background while this call gets the last one,
   * so a job never waits on the JWKS after that.
   */
  async #answer(): Promise<{ kids: string[] } | null> {
    if (Date.now() - this.#readAt >= TRUST_CACHE_MS) {
      const reading = (this.#reading ??= this.#refresh().finally(() => {
        this.#reading = undefined;
      }));
      if (this.#readAt === 0) await reading;
    }
    return this.#known?.state === 'untrusted' ? this.#known : null;
  }

  async #refresh(): Promise<void> {
    const answer = await readTrust(this.#stagingUrl, this.#own);
    this.#readAt = Date.now();
    if (answer.state === 'unknown')
      return this.#log.debug({ why: answer.why }, 'published delegation JWKS not read; keeping the last answer');
    if (answer.state !== this.#known?.state) {
      if (answer.state === 'untrusted')
        this.#log.error(
          { kid: this.#own.kid, trusted: answer.kids },
          `${untrustedKeyReason(this.#stagingUrl, this.#own.kid, answer.kids)}; its execution jobs are held`,
        );
      else this.#log.info({ kid: this.#own.kid }, 'the systems of record trust this executor’s delegation signing key');
    }
    this.#known = answer;
  }
}
