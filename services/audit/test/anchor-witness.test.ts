import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { inTransaction, readWitness, recordAudit, verifyAuditChain, type Db } from '@gatehouse/ledger';
import { parseEnv } from '@gatehouse/platform';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { anchorHead, loadSigningKey } from '../src/domain/anchor.ts';
import { auditEnvShape, auditProductionProblems } from '../src/settings.ts';
import { asAuditOwner, createTestDatabase, rewriteAuditChain, type TestDatabase } from '@gatehouse/test-harness';

// Anchors witnessed outside the ledger (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md):
// a database owner who rewrites or cuts the chain and deletes the anchors too is still caught.

let t: TestDatabase;
let db: Db;
let dir: string;
let key: KeyObject;
let witness: string;
const LIMIT_MS = 90_000; // anchoring interval 30 s + slack 60 s

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  dir = mkdtempSync(join(tmpdir(), 'gh-audit-witness-'));
  key = loadSigningKey(join(dir, 'anchor.pem'));
});
afterAll(async () => {
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  witness = join(dir, `witness-${Math.random().toString(36).slice(2)}`, 'audit-anchors.jsonl');
  await asOwner((trx) => sql`TRUNCATE audit_log, audit_outbox, audit_anchors`.execute(trx));
});

/** Runs `fn` with the append-only triggers off, as the database's owner could. */
const asOwner = (fn: (trx: Db) => Promise<unknown>): Promise<void> => asAuditOwner(db, fn);

/** Records and chains `n` events after the current head. */
async function chain(n: number): Promise<void> {
  await inTransaction(db, async (trx) => {
    for (let i = 0; i < n; i++) await recordAudit(trx, { type: 'run.started', service: 'test', runId: `r${i}`, step: i });
  });
  while ((await chainPending(db)) > 0);
}

/** Rewrites every event and recomputes every link, as a database owner could. */
const rewriteChain = (): Promise<void> => rewriteAuditChain(db);

const deleteAnchors = (): Promise<void> => asOwner((trx) => trx.deleteFrom('audit_anchors').execute());
const pinned = (): { trustedPublicKey: KeyObject } => ({ trustedPublicKey: createPublicKey(key) });

describe('the anchor witness', () => {
  it('every anchor is appended to the witness file with the seq, hash and signature of its row', async () => {
    await chain(5);
    expect(await anchorHead(db, key, witness)).toBe(5);
    await chain(3);
    expect(await anchorHead(db, key, witness)).toBe(8);
    const rows = await db.selectFrom('audit_anchors').select(['seq', 'hash', 'signature']).orderBy('id').execute();
    expect(readWitness(witness).map((w) => ({ seq: String(w.seq), hash: w.hash, signature: w.signature }))).toEqual(rows);
    expect(await verifyAuditChain(db, { ...pinned(), witness: readWitness(witness) })).toMatchObject({ intact: true, witnessChecked: 2 });
  });

  it('a rewrite of the whole chain with every anchor deleted: intact without the witness, rewritten with it', async () => {
    await chain(10);
    await anchorHead(db, key, witness);
    await rewriteChain();
    await deleteAnchors();
    expect((await verifyAuditChain(db, pinned())).intact).toBe(true); // the finding: nothing left to contradict the rewrite
    const v = await verifyAuditChain(db, { ...pinned(), witness: readWitness(witness) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 10 });
    expect(v.reason).toMatch(/^rewritten: /);
  });

  it('a cut tail with its anchors deleted is reported truncated', async () => {
    await chain(6);
    await anchorHead(db, key, witness);
    await chain(6);
    await anchorHead(db, key, witness);
    await asOwner(async (trx) => {
      await trx.deleteFrom('audit_log').where('seq', '>', '6').execute();
      await trx.deleteFrom('audit_anchors').where('seq', '>', '6').execute();
    });
    expect((await verifyAuditChain(db, pinned())).intact).toBe(true);
    const v = await verifyAuditChain(db, { ...pinned(), witness: readWitness(witness) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 12 });
    expect(v.reason).toMatch(/^truncated: .* beyond the head \(seq 6\)/);
  });

  it('anchors deleted from audit_anchors while the chain is untouched are reported', async () => {
    await chain(4);
    await anchorHead(db, key, witness);
    await deleteAnchors();
    const v = await verifyAuditChain(db, { ...pinned(), witness: readWitness(witness) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 4 });
    expect(v.reason).toMatch(/^anchors deleted: .* missing from audit_anchors/);
  });

  it('a witness that is missing or has a malformed line is refused, never read as empty', async () => {
    expect(() => readWitness(witness)).toThrow(/does not exist/);
    await chain(1);
    await anchorHead(db, key, witness);
    writeFileSync(witness, `${readFileSync(witness, 'utf8')}{"seq":"two"}\n`);
    expect(() => readWitness(witness)).toThrow(/line 2 is not a witnessed anchor/);
  });
});

describe('anchor freshness', () => {
  const later = (ms: number): Date => new Date(Date.now() + ms);

  it('every anchor deleted: stale once the first unanchored event is older than interval plus slack', async () => {
    await chain(3);
    await anchorHead(db, key);
    await chain(2);
    await deleteAnchors();
    expect(await verifyAuditChain(db, { ...pinned(), maxUnanchoredAgeMs: LIMIT_MS })).toMatchObject({ intact: true });
    const v = await verifyAuditChain(db, { ...pinned(), maxUnanchoredAgeMs: LIMIT_MS, now: later(LIMIT_MS + 5_000) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 1, newestAnchorSeq: null });
    expect(v.reason).toMatch(/^anchors stale: seq 1 /);
  });

  it('events after the newest anchor: stale from the first of them; an anchored head stays fresh however old', async () => {
    await chain(3);
    await anchorHead(db, key);
    const idle = await verifyAuditChain(db, { ...pinned(), maxUnanchoredAgeMs: LIMIT_MS, now: later(10 * LIMIT_MS) });
    expect(idle).toMatchObject({ intact: true, newestAnchorSeq: 3 });
    await chain(2);
    const v = await verifyAuditChain(db, { ...pinned(), maxUnanchoredAgeMs: LIMIT_MS, now: later(LIMIT_MS + 5_000) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 4 });
    expect(v.reason).toMatch(/^anchors stale/);
  });

  // ADR 0684: chained_at is not hashed, and freshness reads it. The boundary, pinned: without the
  // witness a database owner who deletes the newest anchor and moves chained_at forward passes —
  // and hashing chained_at would not stop it, as the links after the newest remaining anchor are
  // bound by no signature and can be recomputed with any timestamp. Only the witness catches it.
  it('newest anchor deleted and chained_at moved forward: passes freshness without the witness, even with the unanchored tail relinked; the witness catches it', async () => {
    await chain(3);
    await anchorHead(db, key, witness);
    await chain(3);
    await anchorHead(db, key, witness);
    const at = later(10 * LIMIT_MS);
    const fresh = { ...pinned(), maxUnanchoredAgeMs: LIMIT_MS, now: at };
    await asOwner((trx) => trx.deleteFrom('audit_anchors').where('seq', '=', '6').execute());
    expect(await verifyAuditChain(db, fresh)).toMatchObject({ intact: false, firstBadSeq: 4 }); // stale
    await asOwner((trx) => trx.updateTable('audit_log').set({ chained_at: at }).where('seq', '=', '4').execute());
    expect(await verifyAuditChain(db, fresh)).toMatchObject({ intact: true, newestAnchorSeq: 3 }); // the boundary
    await rewriteAuditChain(db, 4); // what a forger does if the timestamp were part of each link's hash
    expect(await verifyAuditChain(db, fresh)).toMatchObject({ intact: true, newestAnchorSeq: 3 });
    const v = await verifyAuditChain(db, { ...fresh, witness: readWitness(witness) });
    expect(v).toMatchObject({ intact: false, firstBadSeq: 6 });
    expect(v.reason).toMatch(/^rewritten: /);
  });
});

describe('production refuses the audit service without a witness', () => {
  const env = (extra: Record<string, string>): Record<string, string> => {
    const pem = join(dir, 'prod-key.pem');
    writeFileSync(pem, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }));
    return {
      GATEHOUSE_ENV: 'production',
      GATEHOUSE_AUDIT_HMAC_KEY: 'h'.repeat(32),
      GATEHOUSE_AUTH_JWKS_URL: 'https://idp.example.com/jwks.json',
      GATEHOUSE_AUTH_ISSUER: 'https://idp.example.com/',
      GATEHOUSE_AUTH_AUDIENCE: 'gatehouse',
      GATEHOUSE_AUTH_ALGORITHMS: 'RS256',
      AUDIT_SIGNING_KEY_PATH: pem,
      ...extra,
    };
  };
  const boot = (source: Record<string, string>) => () => parseEnv(auditEnvShape, source, (e) => auditProductionProblems(e, source));

  it('AUDIT_ANCHOR_WITNESS_PATH unset or relative is refused; an absolute path boots', () => {
    expect(boot(env({}))).toThrow(/AUDIT_ANCHOR_WITNESS_PATH: must be set/);
    expect(boot(env({ AUDIT_ANCHOR_WITNESS_PATH: 'anchors.jsonl' }))).toThrow(/must be an absolute path/);
    expect(boot(env({ AUDIT_ANCHOR_WITNESS_PATH: '/var/lib/gatehouse/audit-witness/anchors.jsonl' }))).not.toThrow();
  });
});
