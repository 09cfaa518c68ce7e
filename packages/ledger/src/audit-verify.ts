import { verify, createPublicKey, type KeyObject } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Db } from './db.ts';
import type { AuditAnchorsTable } from './schema.ts';
import { chainHash, GENESIS_HASH, reservedChainKey } from './audit-chain.ts';
import type { WitnessedAnchor } from './audit-witness.ts';
import { keyFingerprint, reachableKeys, readKeyRotations, signedHandovers, type Handover } from './audit-keys.ts';

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
  /** Key rotations recorded in the chain (`audit.key_rotated`, ADR 0717) that anchors may cross. */
  keyRotations: number;
  /**
   * Of those, rotations from a lost key: handed over by a two-person override instead of the old
   * key's signature, so what came before them is vouched for by the old public key alone.
   */
  keyRotationsByOverride: number;
  /** Anchors of the witness checked against the chain and `audit_anchors` (0 without a witness, or when broken). */
  witnessChecked: number;
  /** The highest anchored sequence number, in `audit_anchors` or the witness; null when there is none. */
  newestAnchorSeq: number | null;
}

/** What {@link verifyAuditChain} checks besides the chain itself. */
export interface VerifyOptions {
  /** The audit service's pinned public key; without it each anchor's own stored key is used. */
  trustedPublicKey?: KeyObject;
  /** The anchors of the witness kept outside Postgres (`readWitness`); none: not checked. */
  witness?: readonly WitnessedAnchor[];
  /**
   * How long an event may stay in the chain with no anchor at or after it, ms (the anchoring
   * interval plus slack, {@link anchorFreshnessLimitMs}); undefined: freshness is not checked.
   */
  maxUnanchoredAgeMs?: number;
  /** The instant freshness is judged at (default: now). */
  now?: Date;
}

/**
 * How long an event may wait for an anchor before verification calls the anchors stale, ms: the
 * anchoring interval plus slack (a timer tick delayed, a chaining batch in flight, a restart).
 */
export function anchorFreshnessLimitMs(anchorIntervalMs: number, slackMs: number): number {
  return anchorIntervalMs + slackMs;
}

type Anchor = Selectable<AuditAnchorsTable>;
type Problem = { seq: number; reason: string };

/** What {@link walkChain} saw: the chain up to its head or its first bad link. */
interface Walk {
  events: number;
  headHash: string;
  bad: Problem | null;
  /** The hash at every watched sequence number. */
  hashAt: Map<number, string>;
  /** The first event after the newest anchor: its seq and when it was chained (ms since the epoch); null when none. */
  firstUnanchored: { seq: number; at: number } | null;
}

/**
 * Walks `audit_log` in sequence order, recomputing every link
 * (`hash = sha256(prev_hash ‖ JCS({seq, ...event}))`, an event carrying `seq` itself, or stored as other jsonb than the writer stores for the value hashed, is bad), checking that sequence numbers have no gap,
 * then checks every anchor: its Ed25519 signature over `<seq>:<hash>` and that the chain still
 * has that hash at that sequence. An anchor's key must be `trustedPublicKey` (the audit
 * service's pinned key) or one a key rotation recorded in the chain connects to it — whoever can
 * rewrite the tables could otherwise re-sign the anchors with a key of their own; without a pin,
 * the first anchor's key or one connected to it, and the result says `anchorsTrusted: false`.
 * Every recorded rotation must be signed by both its keys, and an anchor of another key than the
 * anchor before it needs a rotation chained at or before it handing over in that direction
 * (docs/decisions/0717-audit-key-rotation.md).
 * Reads in pages of 1000.
 *
 * With `witness` (anchors kept outside Postgres) every witnessed anchor must lie within the chain
 * (else `truncated`), match its hash (else `rewritten`) and still be in `audit_anchors` (else
 * `anchors deleted`). With `maxUnanchoredAgeMs`, the first event after the newest anchor (of the
 * table or the witness) may not have been chained longer ago than that (else `anchors stale`):
 * deleting every anchor is then caught without the witness too.
 * @throws Error from the database (unreachable, missing tables).
 */
export async function verifyAuditChain(db: Db, opts: VerifyOptions = {}): Promise<ChainVerification> {
  const trusted = opts.trustedPublicKey ?? null;
  const witness = opts.witness ?? [];
  const anchors = await db.selectFrom('audit_anchors').selectAll().orderBy('id').execute();
  const rotations = await readKeyRotations(db);
  const handovers = signedHandovers(rotations.map((r) => r.rotation));
  const seqs = [...anchors.map((a) => Number(a.seq)), ...witness.map((w) => w.seq)];
  const newest = seqs.length ? Math.max(...seqs) : null;
  const walk = await walkChain(db, new Set(seqs), (newest ?? 0) + 1);
  const result = (bad: Problem | null): ChainVerification => ({
    intact: bad === null,
    events: walk.events,
    headHash: walk.headHash,
    firstBadSeq: bad?.seq ?? null,
    reason: bad?.reason ?? null,
    anchorsChecked: bad ? 0 : anchors.length,
    anchorsTrusted: trusted !== null,
    keyRotations: rotations.length,
    keyRotationsByOverride: rotations.filter((r) => r.rotation?.override).length,
    witnessChecked: bad ? 0 : witness.length,
    newestAnchorSeq: newest,
  });
  if (walk.bad) return result(walk.bad);
  return result(
    checkRotations(rotations, handovers) ??
      checkAnchors(anchors, walk, signingKeys(trusted, anchors, handovers)) ??
      checkHandoverOrder(anchors, handovers) ??
      checkWitness(witness, anchors, walk) ??
      checkFreshness(walk, opts.maxUnanchoredAgeMs, opts.now ?? new Date()),
  );
}

/** Walks the chain from seq 1, stopping at the first bad link; records the hashes at `watch` and when `unanchoredFrom` was chained. */
async function walkChain(db: Db, watch: ReadonlySet<number>, unanchoredFrom: number): Promise<Walk> {
  const walk: Walk = { events: 0, headHash: GENESIS_HASH, bad: null, hashAt: new Map(), firstUnanchored: null };
  let expected = 1;
  for (;;) {
    const page = await db
      .selectFrom('audit_log')
      .selectAll()
      .select(sql<string>`event::text`.as('event_text'))
      .where('seq', '>=', String(expected))
      .orderBy('seq')
      .limit(1000)
      .execute();
    if (!page.length) return walk;
    const altered = await alteredEvents(db, page);
    for (const row of page) {
      const seq = Number(row.seq);
      const prev = walk.headHash;
      if (seq !== expected) walk.bad = { seq: expected, reason: 'missing sequence number' };
      else if (row.prev_hash !== prev) walk.bad = { seq, reason: 'prev_hash does not match the previous link' };
      else walk.bad = checkLink(prev, seq, row.event, row.hash);
      if (!walk.bad && altered.has(seq)) walk.bad = { seq, reason: ALTERED };
      if (walk.bad) return walk;
      walk.headHash = row.hash;
      if (watch.has(seq)) walk.hashAt.set(seq, row.hash);
      if (seq === unanchoredFrom) walk.firstUnanchored = { seq, at: new Date(row.chained_at).getTime() };
      expected++;
      walk.events++;
    }
  }
}

const ALTERED =
  'stored event differs from the one hashed: its jsonb is not what the writer stores for the value it hashed (digits rewritten, e.g. 5 → 5.0)';

/**
 * The sequence numbers of `page` whose stored `event` is not the jsonb the chain writer stores for
 * the value verification reads and hashes (`JSON.stringify` of the parsed event, cast to jsonb).
 * The hash covers the event as JavaScript parses it, so other digits of the same float64 (`5.0`,
 * `1796…624.0000001`) hashed alike while SQL readers saw them (ADR 0684). One query per page,
 * comparing in Postgres, which owns jsonb's normal form.
 * @throws Error from the database.
 */
async function alteredEvents(db: Db, page: { seq: string; event: Record<string, unknown>; event_text: string }[]): Promise<Set<number>> {
  const { rows } = await sql<{ seq: string }>`
    select u.seq from unnest(${page.map((r) => r.seq)}::bigint[], ${page.map((r) => r.event_text)}::text[],
      ${page.map((r) => JSON.stringify(r.event))}::text[]) as u(seq, stored, parsed)
    where u.stored <> u.parsed::jsonb::text`.execute(db);
  return new Set(rows.map((r) => Number(r.seq)));
}

/**
 * Whether the link at `seq` hashes to `hash`: null when it does, else why not — also when the
 * stored event carries a reserved chain key, or a value JCS refuses (a number beyond float64).
 */
function checkLink(prev: string, seq: number, event: Record<string, unknown>, hash: string): Problem | null {
  const reserved = reservedChainKey(event);
  if (reserved !== null) return { seq, reason: `event carries the reserved chain key "${reserved}"` };
  let computed: string;
  try {
    computed = chainHash(prev, seq, event);
  } catch (e) {
    return { seq, reason: `event cannot be hashed: ${(e as Error).message}` };
  }
  return computed === hash ? null : { seq, reason: 'hash does not match the event' };
}

/** The first recorded key rotation that does not parse or that its two keys did not both sign (absent from `handovers`). */
function checkRotations(rotations: { seq: number }[], handovers: readonly Handover[]): Problem | null {
  const signed = new Set(handovers.map((h) => h.seq));
  const bad = rotations.find((r) => !signed.has(r.seq));
  return bad ? { seq: bad.seq, reason: `key rotation at seq ${bad.seq} is not signed by both its keys` } : null;
}

/**
 * The fingerprints of the keys anchors may be signed by: the pinned key and every key a recorded
 * rotation connects to it, either way; without a pin, the first anchor's stored key and those
 * connected to it (ADR 0717). An anchor signed by any other key is one nobody handed over to.
 */
function signingKeys(trusted: KeyObject | null, anchors: Anchor[], handovers: readonly Handover[]): Set<string> {
  const root = trusted ?? (anchors[0] ? createPublicKey(anchors[0].public_key) : null);
  return root ? reachableKeys(keyFingerprint(root), handovers, false) : new Set();
}

/**
 * The first anchor whose key differs from the anchor's before it without a rotation, chained at
 * or before the anchored sequence number, handing over from that key to it in their direction —
 * the audit writer's own rule (ADR 0717). Catches a key rotated out (say, compromised) that signs
 * again after the handover, which the connected-keys check alone accepts.
 */
function checkHandoverOrder(anchors: Anchor[], handovers: readonly Handover[]): Problem | null {
  let previous: string | null = null;
  for (const a of anchors) {
    const seq = Number(a.seq);
    const fp = keyFingerprint(createPublicKey(a.public_key));
    if (previous !== null && fp !== previous) {
      const before = handovers.filter((h) => h.seq <= seq);
      if (!reachableKeys(previous, before, true).has(fp))
        return {
          seq,
          reason: `anchor ${a.id} signed by key ${fp.slice(0, 16)}, which no rotation chained before it hands over to from key ${previous.slice(0, 16)} of the anchor before it`,
        };
    }
    previous = fp;
  }
  return null;
}

/**
 * The first anchor of `audit_anchors` signed by a key outside `keys` (neither the pinned key nor
 * one a recorded rotation hands over to), whose signature fails against its stored key, or whose
 * hash the chain no longer has.
 */
function checkAnchors(anchors: Anchor[], walk: Walk, keys: ReadonlySet<string>): Problem | null {
  for (const a of anchors) {
    const seq = Number(a.seq);
    const key = createPublicKey(a.public_key);
    const fp = keyFingerprint(key);
    if (!keys.has(fp))
      return {
        seq,
        reason: `anchor ${a.id} signature invalid: signed by key ${fp.slice(0, 16)}, which no recorded rotation hands over to`,
      };
    if (!verify(null, Buffer.from(`${seq}:${a.hash}`), key, Buffer.from(a.signature, 'base64')))
      return { seq, reason: `anchor ${a.id} signature invalid` };
    if (walk.hashAt.get(seq) !== a.hash) return { seq, reason: `chain differs from anchor ${a.id}` };
  }
  return null;
}

/** The reason's prefix of a witnessed anchor beyond the head ({@link checkWitness}). */
const TRUNCATED = 'truncated: ';

/**
 * Whether `v` failed because a witnessed anchor lies beyond the chain's head (the tail was cut:
 * audit rows already witnessed outside the ledger are gone, as after a lossy promote); then
 * `v.firstBadSeq` is that anchor's seq and `v.events` the head (ADR 0795).
 */
export function isTruncation(v: Pick<ChainVerification, 'intact' | 'reason' | 'firstBadSeq'>): boolean {
  return !v.intact && v.firstBadSeq !== null && (v.reason ?? '').startsWith(TRUNCATED);
}

/**
 * The first witnessed anchor the chain or `audit_anchors` contradicts: beyond the head (the tail
 * was cut), a different hash at its seq (the chain was rewritten), or no anchor row with its seq,
 * hash and signature (anchors were deleted).
 */
function checkWitness(witness: readonly WitnessedAnchor[], anchors: Anchor[], walk: Walk): Problem | null {
  const stored = new Set(anchors.map((a) => `${a.seq}:${a.hash}:${a.signature}`));
  for (const w of witness) {
    if (w.seq > walk.events)
      return { seq: w.seq, reason: `${TRUNCATED}the witnessed anchor at seq ${w.seq} is beyond the head (seq ${walk.events})` };
    if (walk.hashAt.get(w.seq) !== w.hash)
      return { seq: w.seq, reason: `rewritten: the chain differs from the witnessed anchor at seq ${w.seq}` };
    if (!stored.has(`${w.seq}:${w.hash}:${w.signature}`))
      return { seq: w.seq, reason: `anchors deleted: the witnessed anchor at seq ${w.seq} is missing from audit_anchors` };
  }
  return null;
}

/** Stale anchors: the first event after the newest anchor was chained more than `maxAgeMs` before `now`. */
function checkFreshness(walk: Walk, maxAgeMs: number | undefined, now: Date): Problem | null {
  const first = walk.firstUnanchored;
  if (maxAgeMs === undefined || first === null) return null;
  const age = now.getTime() - first.at;
  if (age <= maxAgeMs) return null;
  return {
    seq: first.seq,
    reason: `anchors stale: seq ${first.seq} was chained ${Math.round(age / 1000)} s ago and no anchor covers it (limit ${maxAgeMs} ms: anchoring interval plus slack)`,
  };
}
