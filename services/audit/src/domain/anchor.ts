import { generateKeyPairSync, createPrivateKey, createPublicKey, randomBytes, sign, type KeyObject } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { appendWitness, keyFingerprint, keyHandedOver, readKeyRotations, type Db } from '@gatehouse/ledger';
import { sql } from 'kysely';
import { testFaults } from '@gatehouse/contracts';

/** Advisory lock key that serialises anchoring across audit replicas (the guard's read and the insert). */
const ANCHOR_LOCK = 0x616e_6368; // "anch"

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

/** Why this writer may not anchor: the newest anchor's key never handed over to its key (ADR 0717). */
export interface AnchorKeyRefusal {
  /** Fingerprints (SHA-256 of the SPKI DER, hex) of the newest anchor's key and of this writer's. */
  newestKey: string;
  ownKey: string;
  /** The newest anchor's sequence number. */
  newestSeq: number;
  /** One line naming both fingerprints and the commands that fix it. */
  message: string;
}

/**
 * The key guard of {@link anchorHead}: null when `key` may anchor — no anchor yet (a fresh ledger:
 * the first key anchors freely), the newest anchor is signed by `key`, or recorded rotations hand
 * over from the newest anchor's key to `key` (`keyHandedOver`); else the refusal. Without it a
 * replica started with a key of its own signs anchors `audit verify` calls BROKEN for good
 * (docs/decisions/0717-audit-key-rotation.md). `GATEHOUSE_TEST_ANCHOR_ANY_KEY=1` (tests only)
 * removes the guard.
 * @throws Error from the database; when the test switch is set outside `GATEHOUSE_ENV=test`.
 */
export async function anchorKeyRefusal(
  db: Db,
  key: KeyObject,
  env: Record<string, string | undefined> = process.env,
): Promise<AnchorKeyRefusal | null> {
  if (testFaults(env).anchorAnyKey) return null;
  const newest = await db.selectFrom('audit_anchors').select(['seq', 'public_key']).orderBy('id', 'desc').limit(1).executeTakeFirst();
  if (!newest) return null;
  const newestKey = keyFingerprint(newest.public_key);
  const ownKey = keyFingerprint(key);
  if (newestKey === ownKey) return null;
  const rotations = (await readKeyRotations(db)).flatMap((r) => (r.rotation ? [r.rotation] : []));
  if (keyHandedOver(newestKey, ownKey, rotations)) return null;
  const newestSeq = Number(newest.seq);
  const message =
    `audit anchoring refused: the newest anchor (seq ${newestSeq}) is signed by key ${newestKey.slice(0, 16)} and this ` +
    `replica's key is ${ownKey.slice(0, 16)}, which no recorded rotation hands over to; events are still chained. ` +
    `A replica: start it with the first key (AUDIT_SIGNING_KEY_PATH, README "Second replicas"). A deliberate key change: ` +
    `gatehouse audit rotate-key --old-key <the PEM of key ${newestKey.slice(0, 16)}> --reason "<why>". ` +
    `A local database whose old key is gone: gatehouse stack up --fresh`;
  return { newestKey, ownKey, newestSeq, message };
}

/**
 * Anchors the current chain head: signs `<seq>:<hash>` with Ed25519 and stores it with the
 * public key, so a rewrite of the whole chain no longer matches its anchors. With `witnessPath`
 * the anchor is then also appended to that witness file outside Postgres (`appendWitness`), so
 * deleting anchors from the database, or rewriting or cutting the chain with them, is still
 * caught by `audit verify` (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md).
 * The row comes first: a witness line whose insert failed would read as a deleted anchor.
 * Under an advisory lock, so the key guard and the insert are one step across replicas.
 * No-op when the head is already anchored. Refuses (no row, no witness line; `onRefused` is
 * called with why) when {@link anchorKeyRefusal} does. Returns the anchored sequence number, or null.
 * @throws Error from the database, or from the file system when the witness cannot be written
 * (the anchor row is then kept: the witness misses one anchor, which verification tolerates).
 */
export async function anchorHead(
  db: Db,
  key: KeyObject,
  witnessPath?: string,
  onRefused: (refusal: AnchorKeyRefusal | null) => void = () => {},
): Promise<number | null> {
  const anchored = await db.transaction().execute(async (trx) => {
    // One anchoring writer at a time: two replicas of two keys over a fresh ledger would both
    // find no anchor and both anchor (ADR 0717).
    await sql`SELECT pg_advisory_xact_lock(${ANCHOR_LOCK})`.execute(trx);
    const head = await trx.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
    if (!head) return null;
    const refusal = await anchorKeyRefusal(trx, key);
    onRefused(refusal);
    if (refusal) return null;
    const last = await trx.selectFrom('audit_anchors').select('seq').orderBy('id', 'desc').limit(1).executeTakeFirst();
    if (last && last.seq === head.seq) return null;
    const signature = sign(null, Buffer.from(`${head.seq}:${head.hash}`), key).toString('base64');
    const publicKey = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
    const row = await trx
      .insertInto('audit_anchors')
      .values({ seq: head.seq, hash: head.hash, signature, public_key: publicKey })
      .returning('created_at')
      .executeTakeFirstOrThrow();
    return { seq: head.seq, hash: head.hash, signature, at: new Date(row.created_at).toISOString() };
  });
  if (!anchored) return null;
  if (witnessPath) appendWitness(witnessPath, { ...anchored, seq: Number(anchored.seq) });
  return Number(anchored.seq);
}
