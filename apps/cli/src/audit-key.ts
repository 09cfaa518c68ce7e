import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { stateRoot } from './stack.ts';

/**
 * The audit service's pinned public key: from `AUDIT_PUBLIC_KEY_PATH` (PEM, production), else
 * derived from the local signing key at `path` / `AUDIT_SIGNING_KEY_PATH` /
 * `<state folder>/audit-ed25519.pem` (GATEHOUSE_STATE_DIR, default `.gatehouse/`). Undefined when none exists yet (no anchor written).
 */
export function auditPublicKey(path?: string): KeyObject | undefined {
  const pub = process.env.AUDIT_PUBLIC_KEY_PATH;
  if (pub) return createPublicKey(readFileSync(pub));
  const file = path ?? process.env.AUDIT_SIGNING_KEY_PATH ?? resolve(stateRoot(), 'audit-ed25519.pem');
  return existsSync(file) ? createPublicKey(createPrivateKey(readFileSync(file))) : undefined;
}
