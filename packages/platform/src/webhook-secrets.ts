import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { SystemError } from '@gatehouse/contracts';
import { z } from 'zod';
import { inTransaction, type Db } from '@gatehouse/ledger';
import { secretProblems } from './production.ts';

/**
 * Webhook signing secrets at rest (docs/decisions/0550-webhook-secrets-sealed-at-rest.md): the
 * ops service seals each endpoint's `whsec_…` secret with AES-256-GCM (node:crypto) under the
 * key `GATEHOUSE_WEBHOOK_SECRET_KEY` before storing it, and the agent-loop's delivery worker
 * opens it to sign. The tenant and URL of the endpoint are the authenticated data, so a sealed
 * secret copied onto another endpoint's row does not open. Rows stored before sealing (a plain
 * `whsec_` value) still open as they are.
 */

/** Local default of the sealing key; production refuses it ({@link webhookSecretKeyProblems}). */
const LOCAL_KEY = 'local-webhook-secret-key-change-me';

/** The sealing key's setting, for the processes that seal or open secrets (ops, agent-loop). */
export const webhookSecretKeyEnv = {
  /** Key material (≥ 32 bytes in production) of the key that seals webhook signing secrets at rest. */
  GATEHOUSE_WEBHOOK_SECRET_KEY: z.string().min(16).default(LOCAL_KEY),
  /**
   * Key materials that sealed secrets before a rotation, comma-separated: secrets sealed under
   * them still open, and ops reseals them under the current key at boot ({@link resealWebhookSecrets}).
   */
  GATEHOUSE_WEBHOOK_SECRET_KEYS_PREVIOUS: z.string().default(''),
};

/** The sealed form: `sealed:v1:<key id>:<iv>:<ciphertext>:<tag>` (base64url parts; key id = 8 hex of SHA-256 of the key). */
const SEALED = /^sealed:v1:([0-9a-f]{8}):([\w-]+):([\w-]+):([\w-]+)$/;

/** A stored webhook secret that cannot be opened: sealed under another key, or altered. */
export class WebhookSecretUnreadable extends SystemError {
  constructor(message: string) {
    super('webhook_secret_unreadable', message);
  }
}

/** One 256-bit AES key derived from key material (SHA-256), with its id. */
export interface DerivedKey {
  key: Buffer;
  /** First 8 hex digits of SHA-256 over the derived key: names the key in a sealed value. */
  id: string;
}

/** The sealing key, and the keys of before a rotation that still open what they sealed. */
export interface WebhookSecretKey extends DerivedKey {
  previous?: readonly DerivedKey[];
}

function derive(material: string): DerivedKey {
  const key = createHash('sha256').update(`gatehouse-webhook-secret\0${material}`).digest();
  return { key, id: createHash('sha256').update(key).digest('hex').slice(0, 8) };
}

/** Derives the sealing key from `GATEHOUSE_WEBHOOK_SECRET_KEY`'s material, with the `previous` materials of earlier keys. */
export function webhookSecretKey(material: string, previous: readonly string[] = []): WebhookSecretKey {
  return { ...derive(material), previous: previous.map(derive) };
}

/** The key ring of settings parsed with {@link webhookSecretKeyEnv}. */
export function webhookSecretKeyOf(env: {
  GATEHOUSE_WEBHOOK_SECRET_KEY: string;
  GATEHOUSE_WEBHOOK_SECRET_KEYS_PREVIOUS: string;
}): WebhookSecretKey {
  const previous = env.GATEHOUSE_WEBHOOK_SECRET_KEYS_PREVIOUS.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  return webhookSecretKey(env.GATEHOUSE_WEBHOOK_SECRET_KEY, previous);
}

/** The key of local and test runs (the default material); production refuses it. */
export function localWebhookSecretKey(): WebhookSecretKey {
  return webhookSecretKey(LOCAL_KEY);
}

/** The endpoint a secret belongs to: its tenant and URL are authenticated with the ciphertext. */
export interface SecretOwner {
  tenant: string;
  url: string;
}

const aad = (o: SecretOwner): Buffer => Buffer.from(JSON.stringify([o.tenant, o.url]));

/** Seals `secret` for storage on `owner`'s row (a fresh 96-bit IV each time). */
export function sealWebhookSecret(secret: string, k: WebhookSecretKey, owner: SecretOwner): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', k.key, iv).setAAD(aad(owner));
  const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return ['sealed:v1', k.id, iv, body, cipher.getAuthTag()].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join(':');
}

/**
 * The signing secret of a stored value: opened when sealed, as is when stored before sealing.
 * @throws WebhookSecretUnreadable when sealed under another key, altered, or moved to another endpoint.
 */
export function openWebhookSecret(stored: string, k: WebhookSecretKey, owner: SecretOwner): string {
  if (stored.startsWith('whsec_')) return stored;
  const m = SEALED.exec(stored);
  if (!m) throw new WebhookSecretUnreadable('stored webhook secret is neither sealed nor a whsec_ secret');
  const [, id, iv, body, tag] = m;
  const under = [k, ...(k.previous ?? [])].find((d) => d.id === id);
  if (!under)
    throw new WebhookSecretUnreadable(
      `webhook secret sealed under key ${id}, not the configured key ${k.id} nor a previous one (GATEHOUSE_WEBHOOK_SECRET_KEY, _KEYS_PREVIOUS)`,
    );
  try {
    const decipher = createDecipheriv('aes-256-gcm', under.key, Buffer.from(iv!, 'base64url'))
      .setAAD(aad(owner))
      .setAuthTag(Buffer.from(tag!, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body!, 'base64url')), decipher.final()]).toString('utf8');
  } catch {
    throw new WebhookSecretUnreadable('webhook secret does not open: altered, or stored on another endpoint');
  }
}

/**
 * Production problems of the sealing key (pass with the process's `productionChecks`): it must be
 * set, as long as every production secret ({@link secretProblems}), and not the audit HMAC key.
 */
export function webhookSecretKeyProblems(
  env: { GATEHOUSE_WEBHOOK_SECRET_KEY: string; GATEHOUSE_AUDIT_HMAC_KEY: string },
  source: Record<string, string | undefined> = process.env,
): string[] {
  const name = 'GATEHOUSE_WEBHOOK_SECRET_KEY';
  return secretProblems(
    { name, value: env[name], explicit: source[name] !== undefined, purpose: 'sealing webhook signing secrets at rest', required: true },
    new Map([[env.GATEHOUSE_AUDIT_HMAC_KEY, 'GATEHOUSE_AUDIT_HMAC_KEY']]),
  );
}

/**
 * Reseals, under the current key, every endpoint's secret stored otherwise: sealed under a
 * previous key, or in clear (stored before sealing). Run by ops at boot, so a rotation completes
 * with a restart and the previous key can then be dropped. One transaction, rows locked; a
 * secret that does not open is left as it is and counted. Returns the counts.
 */
export async function resealWebhookSecrets(db: Db, k: WebhookSecretKey): Promise<{ resealed: number; unreadable: number }> {
  return inTransaction(db, async (trx) => {
    const rows = await trx
      .selectFrom('webhook_endpoints')
      .select(['id', 'tenant', 'url', 'secret'])
      .where('secret', 'not like', `sealed:v1:${k.id}:%`)
      .orderBy('id')
      .forUpdate()
      .execute();
    let resealed = 0;
    for (const row of rows) {
      let secret: string;
      try {
        secret = openWebhookSecret(row.secret, k, row);
      } catch {
        continue;
      }
      await trx
        .updateTable('webhook_endpoints')
        .set({ secret: sealWebhookSecret(secret, k, row) })
        .where('id', '=', row.id)
        .execute();
      resealed++;
    }
    return { resealed, unreadable: rows.length - resealed };
  });
}
