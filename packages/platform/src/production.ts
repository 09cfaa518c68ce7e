import { createPrivateKey } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import type { BaseEnv } from './env.ts';

/** Fewest bytes a production secret may have (256 bits; HS256 and HMAC-SHA256 keys, RFC 7518 §3.2). */
export const MIN_SECRET_BYTES = 32;

/**
 * The secrets of the base settings and what each is for. The user-token secret only matters
 * when set: production verifies user tokens by JWKS and never accepts HS256.
 */
const SECRETS: { name: keyof BaseEnv; purpose: string; required: boolean }[] = [
  { name: 'GATEHOUSE_AUTH_SECRET', purpose: 'local user tokens', required: false },
  { name: 'GATEHOUSE_AUDIT_HMAC_KEY', purpose: 'actor hashes and CSRF tokens', required: true },
];

/** Whether a secret was set explicitly and is not a local default (whose values say `change-me`). */
const isSet = (value: string, explicit: boolean): boolean => explicit && !value.includes('change-me');

/**
 * The production problems of one secret, as `NAME: problem` lines: not set explicitly or a local
 * default (a problem when `required`), under {@link MIN_SECRET_BYTES} bytes, or the value of a
 * secret of another purpose (`others`: value → name).
 */
export function secretProblems(
  s: { name: string; value: string; explicit: boolean; purpose: string; required: boolean },
  others: ReadonlyMap<string, string>,
): string[] {
  if (!isSet(s.value, s.explicit))
    return s.required ? [`${s.name}: must be set (the local default is refused) — key for ${s.purpose}`] : [];
  const problems: string[] = [];
  if (Buffer.byteLength(s.value) < MIN_SECRET_BYTES) problems.push(`${s.name}: too weak, at least ${MIN_SECRET_BYTES} bytes are required`);
  const other = others.get(s.value);
  if (other) problems.push(`${s.name}: the same value as ${other}; each purpose needs its own secret`);
  return problems;
}

/** Algorithms a production user token may never use: shared-secret MACs and `none`. */
const REFUSED_ALGORITHMS = /^(HS\d+|none)$/i;

/**
 * Every reason the base settings are unfit for production, as `NAME: problem` lines (empty:
 * fit). Checked: each secret set explicitly (not the local default), at least
 * {@link MIN_SECRET_BYTES} bytes, and not shared with another purpose; user tokens in JWKS mode
 * with an issuer, an audience and an asymmetric algorithm list (docs/decisions/0180-strict-production-mode.md).
 * @param source the raw environment (tells a default from an explicit value).
 */
export function productionProblems(env: BaseEnv, source: Record<string, string | undefined>): string[] {
  const problems: string[] = [];
  const seen = new Map<string, string>();
  for (const s of SECRETS) {
    const value = String(env[s.name]);
    const explicit = source[s.name] !== undefined;
    problems.push(...secretProblems({ ...s, value, explicit }, seen));
    if (isSet(value, explicit) && !seen.has(value)) seen.set(value, s.name);
  }
  if (!env.GATEHOUSE_AUTH_JWKS_URL)
    problems.push('GATEHOUSE_AUTH_JWKS_URL: must be set (production verifies user tokens by JWKS, never HS256)');
  if (!env.GATEHOUSE_AUTH_ISSUER) problems.push('GATEHOUSE_AUTH_ISSUER: must be set (the iss user tokens must carry)');
  if (!env.GATEHOUSE_AUTH_AUDIENCE) problems.push('GATEHOUSE_AUTH_AUDIENCE: must be set (the aud user tokens must carry)');
  const algs = env.GATEHOUSE_AUTH_ALGORITHMS ?? [];
  if (!algs.length) problems.push('GATEHOUSE_AUTH_ALGORITHMS: must be set (e.g. RS256,ES256)');
  const refused = algs.filter((a) => REFUSED_ALGORITHMS.test(a));
  if (refused.length)
    problems.push(`GATEHOUSE_AUTH_ALGORITHMS: ${refused.join(', ')} not allowed in production (asymmetric algorithms only)`);
  return problems;
}

/**
 * The production check of a process that must never run in production (the model-stub, the
 * staging systems with their test endpoints `/faults`, `/requests`, `/fixtures`): pass it as
 * `parseEnv`'s `productionChecks`, so production refuses to boot it with the other problems.
 */
export function testDoubleRefusal(what: string): () => string[] {
  return () => [
    `GATEHOUSE_ENV: ${what} is a test double with test-only endpoints and never runs in production (set GATEHOUSE_ENV=local or test)`,
  ];
}

/**
 * Why an Ed25519 private key file named by `variable` is unfit for production (empty: fit): the
 * variable must be set explicitly (`explicit`), the file must exist — no key is generated in
 * production — and hold an Ed25519 private key (PKCS#8 PEM). Used for the executor's delegation
 * signing key (docs/decisions/0170-delegated-credentials-bind-the-operation.md) and the audit
 * service's anchoring key (docs/decisions/0180-strict-production-mode.md).
 */
export function ed25519KeyFileProblems(variable: string, path: string, explicit: boolean): string[] {
  if (!explicit) return [`${variable}: must be set (an Ed25519 private key from the secret store)`];
  if (!existsSync(path)) return [`${variable}: ${path} does not exist (no key is generated in production)`];
  try {
    const key = createPrivateKey(readFileSync(path));
    return key.asymmetricKeyType === 'ed25519' ? [] : [`${variable}: ${path} is not an Ed25519 key`];
  } catch (err) {
    return [`${variable}: ${path} is not a readable private key (${(err as Error).message})`];
  }
}

/**
 * Why the audit service's anchor witness is unfit for production (empty: fit): `path` (the value
 * of `AUDIT_ANCHOR_WITNESS_PATH`, undefined when unset) must be set explicitly, to an absolute
 * path — a file on storage the database's owners cannot rewrite, not a default inside the
 * container (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md).
 */
export function anchorWitnessProblems(path: string | undefined): string[] {
  if (!path) return ['AUDIT_ANCHOR_WITNESS_PATH: must be set (the append-only anchor witness, kept outside Postgres)'];
  if (!isAbsolute(path)) return [`AUDIT_ANCHOR_WITNESS_PATH: ${path} must be an absolute path`];
  return [];
}
