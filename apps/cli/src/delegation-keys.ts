import { closeSync, existsSync, openSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ensureDelegationKeyPair, loadDelegationSigningKey, type DelegationSigningKey } from '@gatehouse/credentials';
import { UsageError } from './commands.ts';

/** Files of the delegation key pair (docs/decisions/0170-delegated-credentials-bind-the-operation.md). */
export interface DelegationKeyPaths {
  /** Ed25519 private key, PKCS#8 PEM: the minting side's only (`GATEHOUSE_DELEGATION_SIGNING_KEY_PATH`). */
  signing: string;
  /** JWKS of the public keys: the verifiers' (`GATEHOUSE_DELEGATION_JWKS_PATH`). */
  jwks: string;
}

/** The key files named by `env`, else `<dir>/delegation-ed25519.pem` and `<dir>/delegation-jwks.json`. */
export function delegationKeyPaths(env: Record<string, string | undefined>, dir: string): DelegationKeyPaths {
  return {
    signing: env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH ?? resolve(dir, 'delegation-ed25519.pem'),
    jwks: env.GATEHOUSE_DELEGATION_JWKS_PATH ?? resolve(dir, 'delegation-jwks.json'),
  };
}

/**
 * The folder `gatehouse delegation keys <dir>` writes the key pair into, resolved: absent (it is
 * created) or a directory whose key files ({@link delegationKeyPaths}) are absent or readable files.
 * @throws UsageError naming the path when it, or the nearest existing folder above it, is not a
 * directory, or when a key file in it is not a readable file (exit 2; nothing written).
 */
export function delegationKeyDir(arg: string): string {
  const dir = resolve(arg);
  let at = dir;
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
  if (!statSync(at).isDirectory()) {
    const what = at === dir ? 'is a file' : `is under ${at}, a file`;
    throw new UsageError(`delegation keys: ${dir} ${what}; <dir> names the directory to write the key pair into; nothing written`);
  }
  for (const path of Object.values(delegationKeyPaths({}, dir))) {
    const what = unusableKeyFile(path);
    if (what) throw new UsageError(`delegation keys: ${path} ${what}; it holds a file of the key pair; nothing written`);
  }
  return dir;
}

/** What keeps the key file at `path` from being read, or null when it is absent or a readable file. */
function unusableKeyFile(path: string): string | null {
  try {
    const stat = statSync(path, { throwIfNoEntry: false });
    if (!stat) return null;
    if (stat.isDirectory()) return 'is a directory';
    if (!stat.isFile()) return 'is not a regular file';
    closeSync(openSync(path, 'r'));
    return null;
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
}

/**
 * Outside production, creates the delegation key pair when absent (like the local audit key);
 * in production both files come from the secret store and are never generated.
 */
export async function ensureLocalDelegationKeys(env: Record<string, string | undefined>, paths: DelegationKeyPaths): Promise<void> {
  if (env.GATEHOUSE_ENV === 'production') return;
  await ensureDelegationKeyPair(paths.signing, paths.jwks);
}

/**
 * The signing key of the operator CLI's remediations: `GATEHOUSE_DELEGATION_SIGNING_KEY_PATH`, else
 * the local stack's in the state folder `root`; undefined when this machine holds none (the executor's
 * reconcile job then executes approved remediations).
 */
export async function cliSigningKey(env: Record<string, string | undefined>, root: string): Promise<DelegationSigningKey | undefined> {
  const { signing } = delegationKeyPaths(env, root);
  return existsSync(signing) ? loadDelegationSigningKey(signing) : undefined;
}
