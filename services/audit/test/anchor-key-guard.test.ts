// The anchoring key guard (docs/decisions/0717-audit-key-rotation.md), on real Postgres: two audit
// writers with different keys over one ledger — each its own pool, as two processes — the second
// keeps chaining but refuses to anchor, naming both fingerprints and the rotation command, and the
// chain still verifies with the first key; after `recordKeyRotation` the new key anchors, the old
// one is refused, and verification passes across the rotation with either key pinned; with the
// guard removed (GATEHOUSE_TEST_ANCHOR_ANY_KEY=1) the second key's anchor makes verify BROKEN.
import { generateKeyPairSync, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseTestFaults, resetTestFaultsForTests } from '@gatehouse/contracts';
import {
  createDb,
  inTransaction,
  keyFingerprint,
  recordAudit,
  recordKeyRotation,
  rotationOutcome,
  verifyAuditChain,
  type Db,
} from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { anchorHead, anchorKeyRefusal, HandoverCache, type AnchorKeyRefusal } from '../src/domain/anchor.ts';

const newKey = (): KeyObject => generateKeyPairSync('ed25519').privateKey;
const HMAC = 'k'.repeat(32);
const WRITERS = 6;

let t: TestDatabase;
let a: Db; // the first replica's pool
let b: Db; // the second replica's pool

beforeEach(async () => {
  t = await createTestDatabase();
  a = createDb(t.url, 2);
  b = createDb(t.url, 2);
});
afterEach(async () => {
  await a?.destroy();
  await b?.destroy();
  await t?.drop();
  delete process.env.GATEHOUSE_TEST_ANCHOR_ANY_KEY;
  resetTestFaultsForTests();
});
afterAll(() => resetTestFaultsForTests());

/** `n` audit events in the outbox. */
async function events(db: Db, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await inTransaction(db, (trx) => recordAudit(trx, { type: 'run.started', service: 'test', runId: `r-${i}` }));
}

const anchorKeys = async (db: Db): Promise<string[]> =>
  (await db.selectFrom('audit_anchors').select('public_key').orderBy('id').execute()).map((r) => keyFingerprint(r.public_key));

describe('the anchoring key guard', () => {
  it('a second writer with another key keeps chaining, refuses to anchor, says why; the chain verifies with the first key', async () => {
    const first = newKey();
    const second = newKey();
    await events(a, 3);
    await chainPending(a);
    expect(await anchorHead(a, first)).toBe(3);
    await events(b, 2);
    expect(await chainPending(b)).toBe(2); // events are not lost: the chain goes on
    const refusals: (AnchorKeyRefusal | null)[] = [];
    expect(await anchorHead(b, second, undefined, { onRefused: (r) => refusals.push(r) })).toBeNull();
    expect(await anchorKeys(a)).toEqual([keyFingerprint(first)]); // zero anchors by the second key
    const refusal = refusals.at(-1)!;
    expect(refusal).toMatchObject({ newestKey: keyFingerprint(first), ownKey: keyFingerprint(second), newestSeq: 3 });
    expect(refusal.message).toContain(keyFingerprint(first).slice(0, 16));
    expect(refusal.message).toContain(keyFingerprint(second).slice(0, 16));
    expect(refusal.message).toContain('gatehouse audit rotate-key');
    expect(await anchorHead(a, first)).toBe(5); // the first key anchors on
    const r = await verifyAuditChain(a, { trustedPublicKey: createPublicKey(first) });
    expect(r).toMatchObject({ intact: true, events: 5, anchorsChecked: 2 });
  });

  it('after a recorded rotation the new key anchors, the old one is refused, and verify passes across it', async () => {
    const first = newKey();
    const second = newKey();
    await events(a, 2);
    await chainPending(a);
    await anchorHead(a, first);
    await recordKeyRotation(a, { oldKey: first, newKey: second, reason: 'replace the laptop key', operator: 'ops-gus' }, HMAC);
    await events(b, 1);
    await chainPending(b); // the rotation counts once chained
    expect(await anchorHead(b, second)).toBe(4);
    await events(a, 1);
    await chainPending(a);
    const refused: (AnchorKeyRefusal | null)[] = [];
    expect(await anchorHead(a, first, undefined, { onRefused: (r) => refused.push(r) })).toBeNull(); // handed over: the old key may not anchor again
    expect(refused.at(-1)?.newestKey).toBe(keyFingerprint(second));
    expect(await anchorKeys(a)).toEqual([keyFingerprint(first), keyFingerprint(second)]);
    for (const pinned of [first, second]) {
      const r = await verifyAuditChain(a, { trustedPublicKey: createPublicKey(pinned) });
      expect(r).toMatchObject({ intact: true, anchorsChecked: 2, keyRotations: 1 });
    }
    expect(await verifyAuditChain(a, { trustedPublicKey: createPublicKey(newKey()) })).toMatchObject({ intact: false, firstBadSeq: 2 });
  });

  it('an anchor of the old key after its handover is BROKEN, though both keys are connected to the pinned one', async () => {
    const first = newKey();
    const second = newKey();
    await events(a, 2);
    await chainPending(a);
    await anchorHead(a, first);
    await recordKeyRotation(a, { oldKey: first, newKey: second, reason: 'the first key leaked', operator: 'ops-gus' }, HMAC);
    await events(a, 1);
    await chainPending(a);
    expect(await anchorHead(a, second)).toBe(4);
    // The leaked key, with write access to the ledger, signs the head after the handover.
    await events(a, 1);
    await chainPending(a);
    const head = await a.selectFrom('audit_log').select(['seq', 'hash']).where('seq', '=', '5').executeTakeFirstOrThrow();
    await a
      .insertInto('audit_anchors')
      .values({
        seq: head.seq,
        hash: head.hash,
        signature: sign(null, Buffer.from(`5:${head.hash}`), first).toString('base64'),
        public_key: createPublicKey(first).export({ type: 'spki', format: 'pem' }).toString(),
      })
      .execute();
    for (const pinned of [first, second]) {
      const r = await verifyAuditChain(a, { trustedPublicKey: createPublicKey(pinned) });
      expect(r).toMatchObject({ intact: false, firstBadSeq: 5 });
      expect(r.reason).toContain('no rotation chained before it hands over to');
    }
  });

  it("the writer's cache sees a rotation chained since its last read, never one after the head it judges", async () => {
    const first = newKey();
    const second = newKey();
    await events(a, 2);
    await chainPending(a);
    await anchorHead(a, first);
    const handovers = new HandoverCache();
    expect(await anchorHead(b, second, undefined, { handovers })).toBeNull();
    await recordKeyRotation(a, { oldKey: first, newKey: second, reason: 'planned', operator: 'ops-gus' }, HMAC);
    await chainPending(a); // the rotation is seq 3
    expect(await anchorKeyRefusal(b, second, { handovers })).toBeNull(); // the same cache reads what was chained since
    // Judged for a head before the rotation, the rotation does not count: neither read nor cached.
    expect(await anchorKeyRefusal(b, second, { handovers, headSeq: 2 })).not.toBeNull();
    expect(await anchorKeyRefusal(b, second, { handovers: new HandoverCache(), headSeq: 2 })).not.toBeNull();
    expect(await anchorHead(b, second, undefined, { handovers })).toBe(3);
  });

  it('a rotation the old key did not sign hands nothing over and verify calls it BROKEN', async () => {
    const first = newKey();
    const second = newKey();
    const stranger = newKey();
    await events(a, 2);
    await chainPending(a);
    await anchorHead(a, first);
    // Claims first → second, but the "old" signature is the stranger's.
    const forged = rotationOutcome(stranger, second, 'forged').replace(
      /^from:[^;]+/,
      `from:${createPublicKey(first).export({ type: 'spki', format: 'der' }).toString('base64')}`,
    );
    await inTransaction(b, (trx) => recordAudit(trx, { type: 'audit.key_rotated', service: 'cli', runId: null, outcome: forged }));
    await chainPending(b);
    expect(await anchorHead(b, second)).toBeNull();
    expect(await anchorKeys(a)).toEqual([keyFingerprint(first)]);
    const r = await verifyAuditChain(a, { trustedPublicKey: createPublicKey(first) });
    expect(r).toMatchObject({ intact: false, firstBadSeq: 3 });
    expect(r.reason).toContain('not signed by both its keys');
  });

  it('with the guard removed (GATEHOUSE_TEST_ANCHOR_ANY_KEY=1) the second key anchors and verify reports BROKEN', async () => {
    process.env.GATEHOUSE_TEST_ANCHOR_ANY_KEY = '1';
    const env = process.env.GATEHOUSE_ENV;
    process.env.GATEHOUSE_ENV = 'test';
    resetTestFaultsForTests();
    try {
      const first = newKey();
      const second = newKey();
      await events(a, 2);
      await chainPending(a);
      await anchorHead(a, first);
      await events(b, 1);
      await chainPending(b);
      expect(await anchorHead(b, second)).toBe(3);
      const r = await verifyAuditChain(a, { trustedPublicKey: createPublicKey(first) });
      expect(r).toMatchObject({ intact: false, firstBadSeq: 3 });
      expect(r.reason).toContain('no recorded rotation hands over');
      // Without a pin too: the second key is not connected to the first anchor's.
      expect(await verifyAuditChain(a)).toMatchObject({ intact: false, firstBadSeq: 3 });
    } finally {
      process.env.GATEHOUSE_ENV = env;
    }
  });

  it('the switch is refused outside tests', () => {
    expect(() => parseTestFaults({ GATEHOUSE_ENV: 'production', GATEHOUSE_TEST_ANCHOR_ANY_KEY: '1' })).toThrow(
      /GATEHOUSE_TEST_ANCHOR_ANY_KEY may only be set with GATEHOUSE_ENV=test/,
    );
  });

  it('six writers of six keys over a fresh ledger, released together, five rounds: only one key ever anchors', async () => {
    for (let round = 0; round < 5; round++) {
      const fresh = await createTestDatabase();
      const pools = Array.from({ length: WRITERS }, () => createDb(fresh.url, 1));
      try {
        await events(pools[0]!, 2);
        await chainPending(pools[0]!);
        await Promise.all(pools.map((db) => anchorKeys(db))); // every pool connected before the barrier
        const keys = pools.map(() => newKey());
        let arrived = 0;
        let release!: () => void;
        const all = new Promise<void>((r) => (release = r));
        const go = (): Promise<void> => (++arrived === WRITERS && release(), all);
        const anchored = await Promise.all(pools.map(async (db, i) => (await go(), anchorHead(db, keys[i]!))));
        expect(anchored.filter((n) => n !== null)).toEqual([2]);
        expect(new Set(await anchorKeys(pools[0]!)).size).toBe(1);
      } finally {
        await Promise.all(pools.map((p) => p.destroy()));
        await fresh.drop();
      }
    }
  });
});
