import { createPublicKey, type KeyObject } from 'node:crypto';
import { sql } from 'kysely';
import {
  actorHash,
  inTransaction,
  keyFingerprint,
  parseRotation,
  lostKeyOverrideDigest,
  lostKeyRotationOutcome,
  recordAudit,
  type Db,
} from '@gatehouse/ledger';
import { consumeOverride, overrideRefusal, requestOverride } from './overrides.ts';

/** The subject of every `audit_key` override (its approval's `release_id`): the audit anchoring key. */
export const AUDIT_KEY_SUBJECT = 'audit-key';

/**
 * What {@link replaceLostAuditKey} did: `rotated` (the handover is recorded, by `approvalId`),
 * `recorded` (a rotation from the lost key to this one is already recorded, chained or about to be:
 * nothing was asked or written), `asked` (a new override awaits a second person) or `waiting`
 * (the override asked before is still pending). `from` and `to` are the fingerprints (SHA-256 of the SPKI DER, hex).
 */
export type LostKeyResult =
  | { kind: 'rotated'; from: string; to: string; approvalId: string }
  | { kind: 'recorded'; from: string; to: string }
  | { kind: 'asked'; from: string; to: string; approvalId: string; expiresAt: Date }
  | { kind: 'waiting'; from: string; to: string };

/**
 * `gatehouse audit replace-lost-key`: hands the audit anchors over from the key of the newest
 * anchor, whose private key is lost, to `newKey`, on a second person's word instead of the old
 * key's signature (docs/decisions/0717-audit-key-rotation.md). The override is an approval of the
 * approval service (kind `audit_key`, ADR 0230's two-person rule: a policy owner or another
 * operator, never the requester) bound to exactly this handover ({@link lostKeyOverrideDigest}).
 * The first call asks for it; once it is approved, the next call consumes it and records, in the
 * same transaction, the `audit.key_rotated` event naming the approval, which the new key signs.
 * Called again while it is pending, it asks for nothing new; called again after the rotation is
 * recorded (before the new key anchored), it answers `recorded` and asks for nothing.
 * @throws Error when nothing is anchored yet (the first key anchors freely), when `newKey` already
 * signs the newest anchor, when the reason is malformed; the database's errors.
 */
export async function replaceLostAuditKey(
  db: Db,
  r: { newKey: KeyObject; reason: string; operator: string; hmacKey: string },
): Promise<LostKeyResult> {
  const newest = await db.selectFrom('audit_anchors').select(['seq', 'public_key']).orderBy('id', 'desc').limit(1).executeTakeFirst();
  if (!newest) throw new Error('nothing is anchored yet: the audit service anchors with its key as it is, no rotation needed');
  const oldKey = createPublicKey(newest.public_key);
  const from = keyFingerprint(oldKey);
  const to = keyFingerprint(r.newKey);
  if (from === to)
    throw new Error(`the newest anchor (seq ${newest.seq}) is already signed by this key (${to.slice(0, 16)}): nothing to replace`);
  if (await handoverRecorded(db, from, to)) return { kind: 'recorded', from, to };
  const digest = lostKeyOverrideDigest(from, to);
  const summary = `audit_key:${from.slice(0, 16)}→${to.slice(0, 16)}`;
  const rotated = await inTransaction(db, async (trx) => {
    const opts = { release: AUDIT_KEY_SUBJECT, kind: 'audit_key' as const, digest, summary, operator: r.operator, hmacKey: r.hmacKey };
    const approvalId = await consumeOverride(trx, opts);
    if (!approvalId) return { approvalId: null, why: await overrideRefusal(trx, AUDIT_KEY_SUBJECT, 'audit_key', digest) };
    const outcome = lostKeyRotationOutcome(oldKey, r.newKey, approvalId, r.reason);
    await recordAudit(trx, {
      type: 'audit.key_rotated',
      service: 'cli',
      runId: null,
      actorHash: actorHash(r.hmacKey, r.operator),
      outcome,
    });
    return { approvalId, why: null };
  });
  if (rotated.approvalId) return { kind: 'rotated', from, to, approvalId: rotated.approvalId };
  if (rotated.why === 'pending') return { kind: 'waiting', from, to };
  const ticket = await requestOverride(db, {
    release: AUDIT_KEY_SUBJECT,
    kind: 'audit_key',
    items: [`from:${from}`, `to:${to}`],
    manifest: null,
    facts: { newestAnchorSeq: Number(newest.seq), lostKey: from, newKey: to },
    digest,
    summary,
    reason: r.reason,
    operator: r.operator,
    hmacKey: r.hmacKey,
  });
  return { kind: 'asked', from, to, approvalId: ticket.approvalId, expiresAt: ticket.expiresAt };
}

/**
 * Whether an `audit.key_rotated` event from `fromFp` to `toFp` (fingerprints) is recorded, in the
 * chain or still in the outbox — the handover is done and only waits for the new key's first
 * anchor. A handful of rows: rotations are rare.
 * @throws Error from the database.
 */
async function handoverRecorded(db: Db, fromFp: string, toFp: string): Promise<boolean> {
  const isRotation = sql<boolean>`event->>'type' = 'audit.key_rotated'`;
  const rows = [
    ...(await db
      .selectFrom('audit_log')
      .select(sql<string>`event->>'outcome'`.as('outcome'))
      .where(isRotation)
      .execute()),
    ...(await db
      .selectFrom('audit_outbox')
      .select(sql<string>`event->>'outcome'`.as('outcome'))
      .where(isRotation)
      .execute()),
  ];
  return rows.some((r) => {
    const rotation = parseRotation(0, r.outcome ?? '');
    return rotation !== null && keyFingerprint(rotation.from) === fromFp && keyFingerprint(rotation.to) === toFp;
  });
}
