import { delegationPublicJwk, PUBLISHED_JWKS_PATH, type DelegationSigningKey } from '@gatehouse/credentials';
import { needsOperator, type Logger, type ReadyCheck } from '@gatehouse/platform';

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

/**
 * The executor's `delegationKey` readiness check (ADR 0761): fails, marked {@link needsOperator}
 * (no dependency coming back clears it; `stack up` stops at once and names it, ADR 0729), while
 * the JWKS the systems of record at `stagingUrl` publish does not list `signing`'s key. The JWKS
 * is read at most every {@link TRUST_CACHE_MS}. A read that gives no answer (the systems of record
 * down, or not publishing) keeps the last answer, and passes before any: their availability is
 * not this check's business — a write then meets it as a dependency fault. Each change of answer
 * is logged, an untrusted key at error level with both key ids.
 */
export async function delegationTrustCheck(stagingUrl: string, signing: DelegationSigningKey, log: Logger): Promise<ReadyCheck> {
  const jwk = await delegationPublicJwk(signing.key);
  const own = { kid: signing.kid, x: String(jwk.x) };
  let known: Exclude<TrustAnswer, { state: 'unknown' }> | undefined;
  let readAt = 0;
  let reading: Promise<void> | undefined;
  const refresh = async (): Promise<void> => {
    const answer = await readTrust(stagingUrl, own);
    readAt = Date.now();
    if (answer.state === 'unknown') return log.debug({ why: answer.why }, 'published delegation JWKS not read; keeping the last answer');
    if (answer.state !== known?.state) {
      if (answer.state === 'untrusted')
        log.error({ kid: own.kid, trusted: answer.kids }, untrustedKeyReason(stagingUrl, own.kid, answer.kids));
      else log.info({ kid: own.kid }, 'the systems of record trust this executor’s delegation signing key');
    }
    known = answer;
  };
  return needsOperator(async () => {
    if (Date.now() - readAt >= TRUST_CACHE_MS)
      await (reading ??= refresh().finally(() => {
        reading = undefined;
      }));
    if (known?.state === 'untrusted') throw new Error(untrustedKeyReason(stagingUrl, own.kid, known.kids));
  });
}
