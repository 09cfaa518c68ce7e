import { generateKeyPairSync, createPrivateKey, createPublicKey, randomBytes, sign, type KeyObject } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { appendWitness, keyFingerprint, reachableKeys, readKeyRotations, signedHandovers, type Db, type Handover } from '@gatehouse/ledger';
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
 * The signed key handovers of the chain, read once and then only for the events chained since
 * (a range scan of `audit_log`'s key), so a refused replica does not re-read and re-verify every
 * rotation on each anchoring tick. One per writer and database; tests may pass none (a fresh one).
 */
export class HandoverCache {
  #through = 0;
  #handovers: Handover[] = [];

  /**
   * The signed handovers chained at or before `seq`, in sequence order.
   * @throws Error from the database.
   */
  async upTo(db: Db, seq: number): Promise<Handover[]> {
    if (seq > this.#through) {
      const fresh = await readKeyRotations(db, { after: this.#through, upTo: seq });
      this.#handovers.push(...signedHandovers(fresh.map((r) => r.rotation)));
      this.#through = seq;
    }
    return this.#handovers.filter((h) => h.seq <= seq);
  }
}

/** How {@link anchorKeyRefusal} and {@link anchorHead} judge and report the key guard. */
export interface AnchorKeyOptions {
  /** The writer's handover cache (default: a fresh one, which reads every rotation). */
  handovers?: HandoverCache;
  /** Called on every judgement with the refusal, or null when this key may anchor. */
  onRefused?: (refusal: AnchorKeyRefusal | null) => void;
  env?: Record<string, string | undefined>;
}

/**
 * The key guard of {@link anchorHead}: null when `key` may anchor — no anchor yet (a fresh ledger:
 * the first key anchors freely), the newest anchor is signed by `key`, or rotations chained at or
 * before `headSeq` (default: the chain's head) hand over from the newest anchor's key to `key`,
 * in their direction (`reachableKeys`); else the refusal. Without it a replica started with a key
 * of its own signs anchors `audit verify` calls BROKEN for good
 * (docs/decisions/0717-audit-key-rotation.md). `GATEHOUSE_TEST_ANCHOR_ANY_KEY=1` (tests only)
 * removes the guard.
 * @throws Error from the database; when the test switch is set outside `GATEHOUSE_ENV=test`.
 */
export async function anchorKeyRefusal(
  db: Db,
  key: KeyObject,
  opts: AnchorKeyOptions & { headSeq?: number } = {},
): Promise<AnchorKeyRefusal | null> {
  if (testFaults(opts.env ?? process.env).anchorAnyKey) return null;
  const newest = await db.selectFrom('audit_anchors').select(['seq', 'public_key']).orderBy('id', 'desc').limit(1).executeTakeFirst();
  if (!newest) return null;
  const newestKey = keyFingerprint(newest.public_key);
  const ownKey = keyFingerprint(key);
  if (newestKey === ownKey) return null;
  const headSeq = opts.headSeq ?? (await chainHead(db))?.seq ?? 0;
  const handovers = await (opts.handovers ?? new HandoverCache()).upTo(db, headSeq);
  if (reachableKeys(newestKey, handovers, true).has(ownKey)) return null;
  const newestSeq = Number(newest.seq);
  const message =
    `audit anchoring refused: the newest anchor (seq ${newestSeq}) is signed by key ${newestKey.slice(0, 16)} and this ` +
    `replica's key is ${ownKey.slice(0, 16)}, which no recorded rotation hands over to; events are still chained. ` +
    `A replica: start it with the first key (AUDIT_SIGNING_KEY_PATH, README "Second replicas"). A deliberate key change: ` +
    `gatehouse audit rotate-key --old-key <the PEM of key ${newestKey.slice(0, 16)}> --reason "<why>" ` +
    `(that key lost: gatehouse audit replace-lost-key --reason "<why>", on a second person's approval). ` +
    `A local database whose old key is gone: gatehouse stack up --fresh`;
  return { newestKey, ownKey, newestSeq, message };
}

/** The chain's newest link (seq as a number), or undefined for an empty chain. */
async function chainHead(db: Db): Promise<{ seq: number; hash: string } | undefined> {
  const head = await db.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirst();
  return head && { seq: Number(head.seq), hash: head.hash };
}

/**
 * Anchors the current chain head: signs `<seq>:<hash>` with Ed25519 and stores it with the
 * public key, so a rewrite of the whole chain no longer matches its anchors. With `witnessPath`
 * the anchor is then also appended to that witness file outside Postgres (`appendWitness`), so
 * deleting anchors from the database, or rewriting or cutting the chain with them, is still
 * caught by `audit verify` (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md).
 * The row comes first: a witness line whose insert failed would read as a deleted anchor.
 * Under an advisory lock, so the key guard and the insert are one step across replicas.
 * No-op when the head is already anchored. Refuses (no row, no witness line; `opts.onRefused` is
 * called with why) when {@link anchorKeyRefusal} does. Returns the anchored sequence number, or null.
 * @throws Error from the database, or from the file system when the witness cannot be written
 * (the anchor row is then kept: the witness misses one anchor, which verification tolerates).
 */
export async function anchorHead(db: Db, key: KeyObject, witnessPath?: string, opts: AnchorKeyOptions = {}): Promise<number | null> {
  const anchored = await db.transaction().execute(async (trx) => {
    // One anchoring writer at a time: two replicas of two keys over a fresh ledger would both
    // find no anchor and both anchor (ADR 0717).
    await sql`SELECT pg_advisory_xact_lock(${ANCHOR_LOCK})`.execute(trx);
    const head = await chainHead(trx);
    if (!head) return null;
    // Rotations up to this head only: one chained after it does not sign for an anchor before it.
    const refusal = await anchorKeyRefusal(trx, key, { ...opts, headSeq: head.seq });
    opts.onRefused?.(refusal);
    if (refusal) return null;
    const last = await trx.selectFrom('audit_anchors').select('seq').orderBy('id', 'desc').limit(1).executeTakeFirst();
    if (last && Number(last.seq) === head.seq) return null;
    const signature = sign(null, Buffer.from(`${head.seq}:${head.hash}`), key).toString('base64');
    const publicKey = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
    const row = await trx
      .insertInto('audit_anchors')
      .values({ seq: String(head.seq), hash: head.hash, signature, public_key: publicKey })
      .returning('created_at')
      .executeTakeFirstOrThrow();
    return { seq: head.seq, hash: head.hash, signature, at: new Date(row.created_at).toISOString() };
  });
  if (!anchored) return null;
  if (witnessPath) appendWitness(witnessPath, anchored);
  return anchored.seq;
}
