import { createPrivateKey, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { keyFingerprint, recordKeyRotation, type Db } from '@gatehouse/ledger';
import { replaceLostAuditKey } from '@gatehouse/operations';
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

/**
 * `gatehouse audit replace-lost-key [--new-key <pem>] --reason <why>`: hands the anchors over from
 * the newest anchor's key, whose private key is lost, to the new key (default: the local audit
 * service's, {@link localSigningKeyPath}) on a second person's approved override instead of the
 * old key's signature (`replaceLostAuditKey`, docs/decisions/0717-audit-key-rotation.md). The first
 * run asks for the override and says who approves it and where; once it is approved, the next run
 * records the rotation. Returns 0 when the rotation is recorded (now or before), 1 while it waits for the second person.
 * @throws UsageError for a missing or unreadable key file; Error when nothing is anchored yet or the
 * key already signs the newest anchor; the database's errors.
 */
export async function auditReplaceLostKeyCommand(
  db: Db,
  opts: { newKey?: string | undefined; reason: string; operator: string; hmacKey: string; out: (line: string) => void },
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  const newKey = readPrivateKey('--new-key', opts.newKey ?? localSigningKeyPath(env));
  const r = await replaceLostAuditKey(db, { newKey, reason: opts.reason, operator: opts.operator, hmacKey: opts.hmacKey });
  const keys = `${r.from.slice(0, 16)} (lost) → ${r.to.slice(0, 16)}`;
  if (r.kind === 'rotated') {
    opts.out(
      `audit key rotation recorded by two-person override ${r.approvalId}: ${keys}; the audit service anchors with the new key once it is chained`,
    );
    opts.out(`what came before the rotation is vouched for by the lost key's public key: keep it with the anchor witness for audit verify`);
    return 0;
  }
  if (r.kind === 'recorded') {
    opts.out(
      `the rotation ${keys} is already recorded: the audit service anchors with the new key once it is chained; nothing was asked or written`,
    );
    return 0;
  }
  if (r.kind === 'waiting')
    opts.out(
      `the override for ${keys} awaits a second person (a policy owner or another operator) in the approval inbox; run this again once it is approved. Nothing was rotated.`,
    );
  else
    opts.out(
      `asked for a second person: override ${r.approvalId} for ${keys}, to be approved by a policy owner or another operator in the approval inbox or with POST /v1/approvals/${r.approvalId}/decision before ${r.expiresAt.toISOString()}; then run this again. Nothing was rotated.`,
    );
  return 1;
}
