import { createPrivateKey, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { keyFingerprint, recordKeyRotation, type Db } from '@gatehouse/ledger';
import { UsageError } from './commands.ts';
import { stateRoot } from './stack.ts';

/**
 * The audit signing key the local audit service uses: `AUDIT_SIGNING_KEY_PATH`, else
 * `<state folder>/audit-ed25519.pem` (GATEHOUSE_STATE_DIR, default `.gatehouse/`).
 */
export function localSigningKeyPath(env: Record<string, string | undefined> = process.env): string {
  return env.AUDIT_SIGNING_KEY_PATH ?? resolve(stateRoot(env), 'audit-ed25519.pem');
}

/**
 * Reads an Ed25519 private key (PEM) named on the command line.
 * @throws UsageError (exit 2, nothing ran) when the file does not exist or holds no Ed25519 private key.
 */
export function readPrivateKey(flag: string, path: string): KeyObject {
  const file = resolve(path);
  if (!existsSync(file)) throw new UsageError(`${flag}: no such file ${file}`);
  let key: KeyObject;
  try {
    key = createPrivateKey(readFileSync(file));
  } catch {
    throw new UsageError(`${flag}: ${file} holds no private key (PEM)`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new UsageError(`${flag}: ${file} is not an Ed25519 key`);
  return key;
}

/**
 * `gatehouse audit rotate-key --old-key <pem> [--new-key <pem>] --reason <why>`: records in the
 * audit chain that the anchors of the old key are followed by those of the new key (default: the
 * local audit service's key, {@link localSigningKeyPath}); both keys sign the handover, and the
 * operator is named by the event (docs/decisions/0717-audit-key-rotation.md). Prints both
 * fingerprints. Returns 0.
 * @throws UsageError for a missing or unreadable key file, or the same key twice; the database's errors.
 */
export async function auditRotateKeyCommand(
  db: Db,
  opts: { oldKey: string; newKey?: string | undefined; reason: string; operator: string; hmacKey: string; out: (line: string) => void },
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  const oldKey = readPrivateKey('--old-key', opts.oldKey);
  const newKey = readPrivateKey('--new-key', opts.newKey ?? localSigningKeyPath(env));
  if (keyFingerprint(oldKey) === keyFingerprint(newKey))
    throw new UsageError(`--old-key and --new-key are the same key (${keyFingerprint(oldKey).slice(0, 16)}): nothing to rotate`);
  const r = await recordKeyRotation(db, { oldKey, newKey, reason: opts.reason, operator: opts.operator }, opts.hmacKey);
  opts.out(
    `audit key rotation recorded: ${r.from.slice(0, 16)} → ${r.to.slice(0, 16)}; the audit service anchors with the new key once it is chained`,
  );
  return 0;
}
