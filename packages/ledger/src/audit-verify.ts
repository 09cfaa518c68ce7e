import { verify, createPublicKey, type KeyObject } from 'node:crypto';
import type { Db } from './db.ts';
import { chainHash, GENESIS_HASH } from './audit-chain.ts';

/** Result of walking the chain. `firstBadSeq` is the first sequence number that fails. */
export interface ChainVerification {
  intact: boolean;
  events: number;
  headHash: string;
  firstBadSeq: number | null;
  reason: string | null;
  anchorsChecked: number;
  /** True when anchors were checked against a pinned trusted key, not the key stored with them. */
  anchorsTrusted: boolean;
}

/**
 * Walks `audit_log` in sequence order, recomputing every link
 * (`hash = sha256(prev_hash ‖ JCS(event with seq))`), checking that sequence numbers have no gap,
 * then checks every anchor: its Ed25519 signature over `<seq>:<hash>` and that the chain still
 * has that hash at that sequence. Signatures are checked against `trustedPublicKey` (the audit
 * service's pinned key) when given — whoever can rewrite the tables could otherwise re-sign the
 * anchors with a key of their own; without it, against the key stored with each anchor, and the
 * result says `anchorsTrusted: false`. Reads in pages of 1000.
 */
export async function verifyAuditChain(db: Db, opts: { trustedPublicKey?: KeyObject } = {}): Promise<ChainVerification> {
  const trusted = opts.trustedPublicKey ?? null;
  let prev = GENESIS_HASH;
  let expected = 1;
  let events = 0;
  const hashAt = new Map<number, string>();
  const anchors = await db.selectFrom('audit_anchors').selectAll().orderBy('id').execute();
  const anchorSeqs = new Set(anchors.map((a) => Number(a.seq)));
  const fail = (seq: number, reason: string): ChainVerification => ({
    intact: false,
    events,
    headHash: prev,
    firstBadSeq: seq,
    reason,
    anchorsChecked: 0,
    anchorsTrusted: trusted !== null,
  });
  for (;;) {
    const page = await db.selectFrom('audit_log').selectAll().where('seq', '>=', String(expected)).orderBy('seq').limit(1000).execute();
    if (!page.length) break;
    for (const row of page) {
      const seq = Number(row.seq);
      if (seq !== expected) return fail(expected, 'missing sequence number');
      if (row.prev_hash !== prev) return fail(seq, 'prev_hash does not match the previous link');
      if (chainHash(prev, { seq, ...row.event }) !== row.hash) return fail(seq, 'hash does not match the event');
      prev = row.hash;
      if (anchorSeqs.has(seq)) hashAt.set(seq, row.hash);
      expected++;
      events++;
    }
  }
  for (const a of anchors) {
    const seq = Number(a.seq);
    const ok = verify(null, Buffer.from(`${seq}:${a.hash}`), trusted ?? createPublicKey(a.public_key), Buffer.from(a.signature, 'base64'));
    if (!ok) return { ...fail(seq, `anchor ${a.id} signature invalid`), events, headHash: prev };
    if (hashAt.get(seq) !== a.hash) return { ...fail(seq, `chain differs from anchor ${a.id}`), events, headHash: prev };
  }
  return {
    intact: true,
    events,
    headHash: prev,
    firstBadSeq: null,
    reason: null,
    anchorsChecked: anchors.length,
    anchorsTrusted: trusted !== null,
  };
}
