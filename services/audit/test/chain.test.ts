import { createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { GENESIS_HASH, inTransaction, recordAudit, verifyAuditChain, type Db } from '@gatehouse/ledger';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { anchorHead, loadSigningKey } from '../src/domain/anchor.ts';
// @gatehouse/testing is not linked into this service's node_modules; imported by path.
import { asAuditOwner, createTestDatabase, rewriteAuditChain, type TestDatabase } from '@gatehouse/test-harness';

let t: TestDatabase;
let db: Db;
let keyDir: string;
let key: KeyObject;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  keyDir = mkdtempSync(join(tmpdir(), 'gh-audit-key-'));
  key = loadSigningKey(join(keyDir, 'keys', 'anchor.pem'));
});
afterAll(async () => {
  await t?.drop();
  if (keyDir) rmSync(keyDir, { recursive: true, force: true });
});

/** Runs `fn` with the append-only triggers off, as a superuser attacker would. */
const asSuperuser = (fn: (trx: Db) => Promise<unknown>): Promise<void> => asAuditOwner(db, fn);

async function record(n: number, from = 1): Promise<void> {
  await inTransaction(db, async (trx) => {
    for (let i = from; i < from + n; i++) await recordAudit(trx, { type: 'run.started', service: 'test', runId: `r${i}`, step: i });
  });
}

async function drain(batch = 500): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await chainPending(db, batch);
    if (!n) return total;
    total += n;
  }
}

async function seqs(): Promise<number[]> {
  const rows = await db.selectFrom('audit_log').select('seq').orderBy('seq').execute();
  return rows.map((r) => Number(r.seq));
}

beforeEach(async () => {
  await asSuperuser(async (trx) => {
    await sql`TRUNCATE audit_log, audit_outbox, audit_anchors`.execute(trx);
  });
});

describe('audit hash chain', () => {
  it('chains 20 events in outbox order and verifies intact', async () => {
    await record(20);
    expect(await drain()).toBe(20);
    expect(await seqs()).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const outbox = await db.selectFrom('audit_outbox').select('id').execute();
    expect(outbox).toEqual([]);
    const steps = await db.selectFrom('audit_log').select('event').orderBy('seq').execute();
    expect(steps.map((r) => (r.event as { step: number }).step)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const first = await db.selectFrom('audit_log').select('prev_hash').where('seq', '=', '1').executeTakeFirstOrThrow();
    expect(first.prev_hash).toBe(GENESIS_HASH);
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 20, firstBadSeq: null });
  });

  it('an edited event at seq 7 is reported as firstBadSeq 7', async () => {
    await record(20);
    await drain();
    await asSuperuser((trx) => sql`UPDATE audit_log SET event = jsonb_set(event, '{service}', '"forged"') WHERE seq = 7`.execute(trx));
    const v = await verifyAuditChain(db);
    expect(v).toMatchObject({ intact: false, firstBadSeq: 7 });
    expect(v.reason).toMatch(/hash/);
  });

  it('a deleted event at seq 5 is reported as firstBadSeq 5', async () => {
    await record(20);
    await drain();
    await asSuperuser((trx) => sql`DELETE FROM audit_log WHERE seq = 5`.execute(trx));
    expect(await verifyAuditChain(db)).toMatchObject({ intact: false, firstBadSeq: 5, reason: 'missing sequence number' });
  });

  it('a consistent rewrite of the whole chain is detected through the anchor', async () => {
    await record(20);
    await drain();
    expect(await anchorHead(db, key)).toBe(20);
    expect(await anchorHead(db, key)).toBeNull(); // head already anchored
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 20, anchorsChecked: 1 });

    await rewriteChain();
    const v = await verifyAuditChain(db);
    expect(v).toMatchObject({ intact: false, firstBadSeq: 20 });
    expect(v.reason).toMatch(/anchor/);
  });

  // Anchors are checked against the audit service's pinned key, not the key stored beside them.
  it('a rewrite re-anchored with an attacker key is detected', async () => {
    await record(20);
    await drain();
    await anchorHead(db, key);
    await rewriteChain();
    const attacker = generateKeyPairSync('ed25519');
    const head = await db.selectFrom('audit_log').select(['seq', 'hash']).orderBy('seq', 'desc').limit(1).executeTakeFirstOrThrow();
    await asSuperuser((trx) =>
      trx
        .updateTable('audit_anchors')
        .set({
          hash: head.hash,
          signature: sign(null, Buffer.from(`${head.seq}:${head.hash}`), attacker.privateKey).toString('base64'),
          public_key: attacker.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        })
        .execute(),
    );
    // Without the pinned key (control removed) the forgery passes; with it, it is caught.
    expect((await verifyAuditChain(db)).intact).toBe(true);
    expect(await verifyAuditChain(db, { trustedPublicKey: createPublicKey(key) })).toMatchObject({ intact: false, anchorsTrusted: true });
  });

  it('an event with a forbidden field (raw ticket text) is refused and nothing is written', async () => {
    const bad = { type: 'run.started' as const, service: 'test', runId: 'r1', text: 'raw ticket' };
    await expect(inTransaction(db, (trx) => recordAudit(trx, bad))).rejects.toThrow(/text/);
    const secret = { type: 'run.started' as const, service: 'test', runId: 'r1', token: 'eyJ...' };
    await expect(inTransaction(db, (trx) => recordAudit(trx, secret))).rejects.toThrow();
    expect(await db.selectFrom('audit_outbox').select('id').execute()).toEqual([]);
    expect(await drain()).toBe(0);
    expect(await seqs()).toEqual([]);
  });

  // ADR 0684: the hashed object is {seq, ...event}; a payload `seq` would replace the link's own.
  it('a stored event that gains "seq": <its own seq> is reported, though its hash is unchanged', async () => {
    await record(5);
    await drain();
    await asSuperuser((trx) => sql`UPDATE audit_log SET event = event || jsonb_build_object('seq', seq) WHERE seq = 3`.execute(trx));
    const v = await verifyAuditChain(db);
    expect(v).toMatchObject({ intact: false, firstBadSeq: 3 });
    expect(v.reason).toMatch(/reserved chain key "seq"/);
  });

  it('an outbox event carrying seq is refused by the chain writer and nothing is chained', async () => {
    await expect(
      inTransaction(db, (trx) => recordAudit(trx, { type: 'run.started', service: 'test', runId: 'r1', seq: 99 } as never)),
    ).rejects.toThrow(/seq/);
    await record(2);
    // Written around recordAudit's schema, as only a direct database writer can.
    await sql`INSERT INTO audit_outbox (event) VALUES (${JSON.stringify({ type: 'run.started', service: 'raw', seq: 1 })}::jsonb)`.execute(
      db,
    );
    await expect(chainPending(db)).rejects.toThrow(/reserved chain key "seq"/);
    expect(await seqs()).toEqual([]);
    expect(await db.selectFrom('audit_outbox').select('id').execute()).toHaveLength(3);
  });

  it('two racing chain writers over 200 events give seq 1..200 without gaps or duplicates', async () => {
    await record(200);
    const [a, b] = await Promise.all([drain(25), drain(25)]);
    expect(a + b).toBe(200);
    expect(await seqs()).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    const outboxIds = await db.selectFrom('audit_log').select('outbox_id').orderBy('seq').execute();
    const ids = outboxIds.map((r) => Number(r.outbox_id));
    expect(new Set(ids).size).toBe(200);
    expect([...ids].sort((x, y) => x - y)).toEqual(ids); // chained in outbox order
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 200 });
  });
});

describe('signing key', () => {
  it('is created once with mode 0600 and reloaded unchanged', () => {
    const path = join(keyDir, 'keys', 'anchor.pem');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const again = loadSigningKey(path);
    expect(again.export({ type: 'pkcs8', format: 'pem' })).toEqual(key.export({ type: 'pkcs8', format: 'pem' }));
    expect(key.asymmetricKeyType).toBe('ed25519');
  });
});

/** Rewrites every event (service → forged) and recomputes every link with fresh hashes. */
async function rewriteChain(): Promise<void> {
  await rewriteAuditChain(db);
  const v = await db.selectFrom('audit_log').select('event').where('seq', '=', '1').executeTakeFirstOrThrow();
  expect((v.event as { service: string }).service).toBe('forged');
}
