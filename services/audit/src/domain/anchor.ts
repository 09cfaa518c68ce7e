import { generateKeyPairSync, createPrivateKey, createPublicKey, randomBytes, sign, type KeyObject } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { appendWitness, type Db } from '@gatehouse/ledger';
import { testFaults } from '@gatehouse/contracts';

/**
 * Loads the Ed25519 anchoring key from a PEM file, creating it (mode 0600) on first use when
 * `create` (local and test). In production the key comes from the secret store via the same path
 * and is never generated (`ed25519KeyFileProblems` of packages/platform refuses the boot first).
 *
 * Several audit replicas may start at once over one key path (docs/decisions/0195-services-as-replicas.md):
 * the key is created create-if-absent — written whole to a file of this process, then hard-linked
 * to `path`, which fails when another process got there first — so every replica signs with the
 * one key on disk, the key `audit verify` pins. `GATEHOUSE_TEST_KEY_CHECK_THEN_WRITE=1` (tests
 * only) writes in place after the existence check instead, the race the link closes.
 * @throws Error when the file is missing and `create` is false, holds no private key, or when the
 * test switch is set outside `GATEHOUSE_ENV=test`.
 */
export function loadSigningKey(path: string, create = true, env: Record<string, string | undefined> = process.env): KeyObject {
  if (!existsSync(path)) {
    if (!create) throw new Error(`audit signing key ${path} does not exist`);
    mkdirSync(dirname(path), { recursive: true });
    const { privateKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' });
    if (checkThenWrite(env)) {
      writeFileSync(path, pem, { mode: 0o600 });
      return privateKey; // the control removed: this process keeps its own key, whoever wrote the file last
    }
    const mine = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    writeFileSync(mine, pem, { mode: 0o600, flag: 'wx' });
    try {
      linkSync(mine, path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err; // another replica created it first: use theirs
    } finally {
      rmSync(mine, { force: true });
    }
  }
  return createPrivateKey(readFileSync(path));
}

/** The control-removed switch of {@link loadSigningKey}. @throws Error outside `GATEHOUSE_ENV=test`. */
function checkThenWrite(env: Record<string, string | undefined>): boolean {
  return testFaults(env).keyCheckThenWrite;
}

/**
 * Anchors the current chain head: signs `<seq>:<hash>` with Ed25519 and stores it with the
 * public key, so a rewrite of the whole chain no longer matches its anchors. With `witnessPath`
 * the anchor is then also appended to that witness file outside Postgres (`appendWitness`), so
 * deleting anchors from the database, or rewriting or cutting the chain with them, is still
 * caught by `audit verify` (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md).
 * The row comes first: a witness line whose insert failed would read as a deleted anchor.
 * No-op when the head is already anchored. Returns the anchored sequence number, or null.
 * @throws Error from the database, or from the file system when the witness cannot be written
 * (the anchor row is then kept: the witness misses one anchor, which verification tolerates).
 */
export async function anchorHead(db: Db, key: KeyObject, witnessPath?: string): Promise<number | null> {
  const head = await db.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
  if (!head) return null;
  const last = await db.selectFrom('audit_anchors').select('seq').orderBy('id', 'desc').limit(1).executeTakeFirst();
  if (last && last.seq === head.seq) return null;
  const signature = sign(null, Buffer.from(`${head.seq}:${head.hash}`), key).toString('base64');
  const publicKey = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
  const row = await db
    .insertInto('audit_anchors')
    .values({ seq: head.seq, hash: head.hash, signature, public_key: publicKey })
    .returning('created_at')
    .executeTakeFirstOrThrow();
  if (witnessPath)
    appendWitness(witnessPath, { seq: Number(head.seq), hash: head.hash, signature, at: new Date(row.created_at).toISOString() });
  return Number(head.seq);
}
