import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { calculateJwkThumbprint, createLocalJWKSet, exportJWK, type JSONWebKeySet, type JWK, type JWTVerifyGetKey } from 'jose';
import { DELEGATION_ALG, type DelegationSigningKey } from './delegated-token.ts';

/**
 * Where a verifier of delegated tokens (the systems of record) publishes the JWKS it trusts, as a
 * path under its base URL (RFC 8615 well-known path); the minting side checks its key is listed
 * there (docs/decisions/0761).
 */
export const PUBLISHED_JWKS_PATH = '/.well-known/jwks.json';

/** The public JWK of an Ed25519 key, with `kid` (its RFC 7638 thumbprint), `alg` and `use`. */
export async function delegationPublicJwk(key: KeyObject): Promise<JWK> {
  const jwk = await exportJWK(createPublicKey(key));
  return { ...jwk, kid: await calculateJwkThumbprint(jwk), alg: DELEGATION_ALG, use: 'sig' };
}

/**
 * Loads the minting side's Ed25519 private key (PKCS#8 PEM at `path`) and derives its `kid`
 * (the RFC 7638 thumbprint of its public JWK, so the JWKS entry and the token header agree
 * without configuration).
 * @throws Error when the file is missing, unreadable or not an Ed25519 private key.
 */
export async function loadDelegationSigningKey(path: string): Promise<DelegationSigningKey> {
  if (!existsSync(path)) throw new Error(`no delegation signing key at ${path} (GATEHOUSE_DELEGATION_SIGNING_KEY_PATH)`);
  const key = readKeyFile(path, 'the delegation signing key', 'a PEM private key', createPrivateKey);
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`the delegation signing key at ${path} is not an Ed25519 key`);
  const jwk = await delegationPublicJwk(key);
  return { key, kid: jwk.kid! };
}

/**
 * Loads the verifiers' key set: a JWKS document (RFC 7517) at `path` holding the public keys of
 * the minting side. Every key must be an Ed25519 public key (`kty` OKP, `crv` Ed25519) with a
 * `kid`; a token is verified with the key its header's `kid` names, so during a rotation the old
 * and the new key are both listed (docs/decisions/0170-delegated-credentials-bind-the-operation.md).
 * @throws Error when the file is missing, not JSON, empty, or holds another kind of key.
 */
export function loadDelegationJwks(path: string): JWTVerifyGetKey {
  return jwksVerifier(readDelegationJwks(path));
}

/**
 * The JWKS document at `path`, checked as {@link loadDelegationJwks} requires: what a verifier
 * trusts, and publishes so the minting side can check its key is among them (ADR 0761).
 * @throws Error when the file is missing, not JSON, empty, or holds another kind of key.
 */
export function readDelegationJwks(path: string): JSONWebKeySet {
  if (!existsSync(path)) throw new Error(`no delegation JWKS at ${path} (GATEHOUSE_DELEGATION_JWKS_PATH)`);
  const doc = readKeyFile(path, 'the delegation JWKS', 'JSON', parseJwks);
  if (!Array.isArray(doc.keys) || doc.keys.length === 0) throw new Error(`the delegation JWKS at ${path} lists no key`);
  for (const k of doc.keys) {
    if (k.kty !== 'OKP' || k.crv !== 'Ed25519' || !k.kid || 'd' in k)
      throw new Error(`the delegation JWKS at ${path} may hold only Ed25519 public keys with a kid`);
  }
  return doc;
}

/** A JWKS document's text parsed as JSON (its shape is checked by the caller). */
function parseJwks(bytes: Buffer): JSONWebKeySet {
  return JSON.parse(bytes.toString('utf8')) as JSONWebKeySet;
}

/**
 * Reads the key file at `path` and parses it with `parse`, naming the file when either fails —
 * a process or `gatehouse delegation keys` then says which file is wrong rather than the parser's
 * bare message (a key's bytes are never repeated: only the parser's reason is).
 * @throws Error "`what` at `path` cannot be read as `as`: <reason>".
 */
function readKeyFile<T>(path: string, what: string, as: string, parse: (bytes: Buffer) => T): T {
  try {
    return parse(readFileSync(path));
  } catch (err) {
    const reason = err instanceof SyntaxError ? 'not valid JSON' : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
    throw new Error(`${what} at ${path} cannot be read as ${as}: ${reason}`, { cause: err });
  }
}

/** Writes `text` to `path` atomically (temporary file, then rename), creating its folder. */
function writeAtomically(path: string, text: string, mode: number): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode });
  renameSync(tmp, path);
}

/**
 * Local and test set-up of the delegation key pair: creates an Ed25519 private key at
 * `privatePath` (PKCS#8 PEM, mode 0600) when absent, and makes sure the JWKS at `jwksPath`
 * lists its public key (creating the file, or adding the key to the keys already listed — the
 * first step of a rotation). Production supplies both files from its secret store instead.
 * @returns the signing key's `kid`.
 * @throws Error naming the file when an existing key file is not a PEM private key, not JSON, or
 *   a JWKS without a `keys` list (nothing is written then).
 */
export async function ensureDelegationKeyPair(privatePath: string, jwksPath: string): Promise<string> {
  if (!existsSync(privatePath)) {
    const { privateKey } = generateKeyPairSync('ed25519');
    writeAtomically(privatePath, privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), 0o600);
  }
  const jwk = await delegationPublicJwk(readKeyFile(privatePath, 'the delegation signing key', 'a PEM private key', createPrivateKey));
  const doc = existsSync(jwksPath) ? readKeyFile(jwksPath, 'the delegation JWKS', 'JSON', parseJwks) : { keys: [] };
  if (!Array.isArray(doc.keys)) throw new Error(`the delegation JWKS at ${jwksPath} has no "keys" list`);
  if (!doc.keys.some((k) => k.kid === jwk.kid))
    writeAtomically(jwksPath, `${JSON.stringify({ keys: [...doc.keys, jwk] }, null, 2)}\n`, 0o644);
  return jwk.kid!;
}

/**
 * A fresh Ed25519 key pair held in memory: the signing key (with its `kid`) and the JWKS listing
 * its public half. For in-process systems of record and tests; processes read files instead.
 */
export async function newDelegationKeyPair(): Promise<{ signing: DelegationSigningKey; jwks: JSONWebKeySet }> {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = await delegationPublicJwk(privateKey);
  return { signing: { key: privateKey, kid: jwk.kid! }, jwks: { keys: [jwk] } };
}

export type { JSONWebKeySet } from 'jose';

/** The verifier of an in-memory JWKS document (every key as {@link loadDelegationJwks} requires). */
export function jwksVerifier(doc: JSONWebKeySet): JWTVerifyGetKey {
  return createLocalJWKSet(doc);
}
