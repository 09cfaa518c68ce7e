import { createHash, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from './db.ts';
import { recordAudit, actorHash } from './audit.ts';

/**
 * An audit anchoring key's fingerprint: the SHA-256 of its public key's SPKI DER, hex (64
 * characters). Accepts the private or the public key; log lines show its first 16 characters.
 */
export function keyFingerprint(key: KeyObject | string): string {
  const pub = typeof key === 'string' ? createPublicKey(key) : key.type === 'private' ? createPublicKey(key) : key;
  return createHash('sha256')
    .update(pub.export({ type: 'spki', format: 'der' }))
    .digest('hex');
}

/** A recorded key rotation: the audit chain's `audit.key_rotated` event at `seq` (docs/decisions/0717-audit-key-rotation.md). */
export interface KeyRotation {
  seq: number;
  /** The key that signed anchors before, and the one that signs them after (public keys). */
  from: KeyObject;
  to: KeyObject;
  /**
   * Signatures of {@link rotationStatement} by the old key and by the new key (base64). The old
   * one is null when the old key was lost and a two-person override stands in for it (`override`).
   */
  oldSignature: string | null;
  newSignature: string;
  /** The approval id of the consumed `audit_key` override that stands in for a lost old key; null for a signed handover. */
  override: string | null;
  /**
   * The action digest of the chain's `approval.consumed` event of `override`, chained before the
   * rotation (filled by {@link readKeyRotations}; null when the chain holds none).
   */
  overrideConsumedDigest?: string | null;
  reason: string;
}

/** The bytes both keys sign for a rotation from `fromFp` to `toFp` (fingerprints). */
export function rotationStatement(fromFp: string, toFp: string): Buffer {
  return Buffer.from(`gatehouse-audit-key-rotation:${fromFp}:${toFp}`);
}

/** The public key as the outcome carries it: SPKI DER, base64. */
function spki(key: KeyObject): string {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  return pub.export({ type: 'spki', format: 'der' }).toString('base64');
}

/**
 * The outcome of an `audit.key_rotated` event:
 * `from:<spki b64>;to:<spki b64>;old_sig:<b64>;new_sig:<b64>;reason:<why>` (the reason last: it may
 * hold `;`). Both keys sign {@link rotationStatement}: the old one hands over, the new one accepts.
 */
export function rotationOutcome(oldKey: KeyObject, newKey: KeyObject, reason: string): string {
  const statement = rotationStatement(keyFingerprint(oldKey), keyFingerprint(newKey));
  const oldSig = sign(null, statement, oldKey).toString('base64');
  const newSig = sign(null, statement, newKey).toString('base64');
  return `from:${spki(oldKey)};to:${spki(newKey)};old_sig:${oldSig};new_sig:${newSig};reason:${reason}`;
}

/**
 * Parses an `audit.key_rotated` outcome ({@link rotationOutcome}, or {@link lostKeyRotationOutcome}
 * with `old_override:<approval id>` in place of the old signature); null when it is not one.
 */
export function parseRotation(seq: number, outcome: string): KeyRotation | null {
  const m = /^from:([^;]+);to:([^;]+);old_(sig|override):([^;]+);new_sig:([^;]+);reason:(.*)$/s.exec(outcome);
  if (!m) return null;
  try {
    const der = (b64: string) => createPublicKey({ key: Buffer.from(b64, 'base64'), format: 'der', type: 'spki' });
    const old = m[3] === 'sig' ? { oldSignature: m[4]!, override: null } : { oldSignature: null, override: m[4]! };
    return { seq, from: der(m[1]!), to: der(m[2]!), ...old, newSignature: m[5]!, reason: m[6]! };
  } catch {
    return null;
  }
}

/**
 * What a two-person override for a lost old key is bound to (its approval's action digest):
 * sha256 (hex) of the {@link rotationStatement} the old key can no longer sign, so the override
 * covers exactly this handover, `fromFp` → `toFp` (docs/decisions/0717-audit-key-rotation.md).
 */
export function lostKeyOverrideDigest(fromFp: string, toFp: string): string {
  return createHash('sha256').update(rotationStatement(fromFp, toFp)).digest('hex');
}

/**
 * The outcome of an `audit.key_rotated` event whose old key was lost: as {@link rotationOutcome}
 * with `old_override:<approval id>` (the consumed two-person override) in place of the old key's
 * signature; the new key still signs. `oldKey` is the old public key, read from its last anchor.
 */
export function lostKeyRotationOutcome(oldKey: KeyObject, newKey: KeyObject, approvalId: string, reason: string): string {
  const newSig = sign(null, rotationStatement(keyFingerprint(oldKey), keyFingerprint(newKey)), newKey).toString('base64');
  return `from:${spki(oldKey)};to:${spki(newKey)};old_override:${approvalId};new_sig:${newSig};reason:${reason}`;
}

/**
 * Whether `r` hands over: the new key accepted (signed {@link rotationStatement}), and the old key
 * handed over — by its signature, or, when it was lost, by a two-person override the chain shows
 * consumed before the rotation and bound to exactly these two keys ({@link lostKeyOverrideDigest}).
 */
export function rotationSigned(r: KeyRotation): boolean {
  const fromFp = keyFingerprint(r.from);
  const toFp = keyFingerprint(r.to);
  const statement = rotationStatement(fromFp, toFp);
  if (!verify(null, statement, r.to, Buffer.from(r.newSignature, 'base64'))) return false;
  if (r.oldSignature !== null) return verify(null, statement, r.from, Buffer.from(r.oldSignature, 'base64'));
  return r.override !== null && r.overrideConsumedDigest === lostKeyOverrideDigest(fromFp, toFp);
}

/**
 * The key rotations recorded in the chain (`audit_log` events of type `audit.key_rotated`), in
 * sequence order, a lost key's rotation with the digest of its override's `approval.consumed`
 * event; an event whose outcome does not parse is returned as null at its seq, so
 * verification can name it. Rotations still in `audit_outbox` do not count until chained.
 * `range` limits the read to sequence numbers after `after` and up to `upTo` (a range scan of the
 * chain's primary key, so a writer re-reading only the events chained since its last read stays cheap).
 * @throws Error from the database.
 */
export async function readKeyRotations(
  db: Db,
  range: { after?: number; upTo?: number } = {},
): Promise<{ seq: number; rotation: KeyRotation | null }[]> {
  let q = db
    .selectFrom('audit_log')
    .select(['seq', sql<string>`event->>'outcome'`.as('outcome')])
    .where(sql<boolean>`event->>'type' = 'audit.key_rotated'`);
  if (range.after !== undefined) q = q.where('seq', '>', String(range.after));
  if (range.upTo !== undefined) q = q.where('seq', '<=', String(range.upTo));
  const rows = await q.orderBy('seq').execute();
  const rotations = rows.map((r) => ({ seq: Number(r.seq), rotation: parseRotation(Number(r.seq), r.outcome ?? '') }));
  for (const { rotation } of rotations)
    if (rotation?.override) rotation.overrideConsumedDigest = await consumedDigest(db, rotation.override, rotation.seq);
  return rotations;
}

/** The action digest of the chain's `approval.consumed` event of `approvalId` before `beforeSeq`; null when there is none. */
async function consumedDigest(db: Db, approvalId: string, beforeSeq: number): Promise<string | null> {
  const row = await db
    .selectFrom('audit_log')
    .select(sql<string | null>`event->>'actionDigest'`.as('digest'))
    .where('seq', '<', String(beforeSeq))
    .where(sql<boolean>`event->>'type' = 'approval.consumed'`)
    .where(sql<boolean>`event->>'approvalId' = ${approvalId}`)
    .executeTakeFirst();
  return row?.digest ?? null;
}

/** A rotation both keys signed, by fingerprint: at chain seq `seq` the key `from` handed over to the key `to`. */
export interface Handover {
  seq: number;
  from: string;
  to: string;
}

/**
 * The rotations of `rotations` both of whose keys signed them ({@link rotationSigned}), as
 * fingerprints, in their order. Each signature is verified here once; unsigned rotations are left
 * out (they hand nothing over; verification reports them on their own).
 */
export function signedHandovers(rotations: readonly (KeyRotation | null)[]): Handover[] {
  return rotations.flatMap((r) => (r && rotationSigned(r) ? [{ seq: r.seq, from: keyFingerprint(r.from), to: keyFingerprint(r.to) }] : []));
}

/**
 * The fingerprints reachable from the key `fromFp` (included) over `handovers`. `directed`: only
 * old → new, possibly through several rotations — what the audit writer asks before it anchors
 * after another key, since a rotation away from a key does not let that key anchor again.
 * Undirected: either way — what verification asks of a pinned key, since both keys signed each
 * rotation (docs/decisions/0717-audit-key-rotation.md).
 */
export function reachableKeys(fromFp: string, handovers: readonly Handover[], directed: boolean): Set<string> {
  const reached = new Set([fromFp]);
  for (let grew = true; grew;) {
    grew = false;
    for (const { from, to } of handovers) {
      const next = reached.has(from) && !reached.has(to) ? to : !directed && reached.has(to) && !reached.has(from) ? from : null;
      if (next === null) continue;
      reached.add(next);
      grew = true;
    }
  }
  return reached;
}

/**
 * `gatehouse audit rotate-key`: records in the audit chain that anchors signed by `oldKey` are
 * followed by anchors signed by `newKey` (both private keys: each signs the handover), as one
 * `audit.key_rotated` event naming the operator (docs/decisions/0717-audit-key-rotation.md).
 * The audit writer then anchors with the new key, and `audit verify` accepts anchors of both.
 * Returns the two fingerprints.
 * @throws Error when both are the same key; from the database.
 */
export async function recordKeyRotation(
  db: Db,
  r: { oldKey: KeyObject; newKey: KeyObject; reason: string; operator: string },
  hmacKey: string,
): Promise<{ from: string; to: string }> {
  const from = keyFingerprint(r.oldKey);
  const to = keyFingerprint(r.newKey);
  if (from === to) throw new Error(`the old and the new audit key are the same key (${from.slice(0, 16)})`);
  const outcome = rotationOutcome(r.oldKey, r.newKey, r.reason);
  await db
    .transaction()
    .execute((trx) =>
      recordAudit(trx, { type: 'audit.key_rotated', service: 'cli', runId: null, actorHash: actorHash(hmacKey, r.operator), outcome }),
    );
  return { from, to };
}
