import { generateKeyPairSync, createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Db } from '@gatehouse/ledger';

/**
 * Loads the Ed25519 anchoring key from a PEM file, creating it (mode 0600) on first use in
 * local mode. In production the key comes from the secret store via the same path.
 */
export function loadSigningKey(path: string): KeyObject {
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true });
    const { privateKey } = generateKeyPairSync('ed25519');
    writeFileSync(path, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  }
  return createPrivateKey(readFileSync(path));
}

/**
 * Anchors the current chain head: signs `<seq>:<hash>` with Ed25519 and stores it with the
 * public key, so a rewrite of the whole chain no longer matches its anchors. No-op when the head
 * is already anchored. Returns the anchored sequence number, or null.
 */
export async function anchorHead(db: Db, key: KeyObject): Promise<number | null> {
  const head = await db.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
  if (!head) return null;
  const last = await db.selectFrom('audit_anchors').select('seq').orderBy('id', 'desc').limit(1).executeTakeFirst();
  if (last && last.seq === head.seq) return null;
  const signature = sign(null, Buffer.from(`${head.seq}:${head.hash}`), key).toString('base64');
  const publicKey = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
  await db.insertInto('audit_anchors').values({ seq: head.seq, hash: head.hash, signature, public_key: publicKey }).execute();
  return Number(head.seq);
}
